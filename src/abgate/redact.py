"""Redaction: the one place that decides what never reaches a record, a log or a report.

Records are meant to be shared, so every text that comes from the user or the
environment (command lines, ``--env`` pairs, engine args and options, launch commands,
endpoint URLs, headers, server logs, environment snapshots, run logs, reports) goes
through here before it is written. A secret is replaced by :data:`REDACTED`; a URL
keeps its host (``http://<redacted>@host:8000``).

A value is secret by its **name** (an env var, a flag, a JSON key, a header, the
``NAME`` of ``NAME=VALUE``), judged on whole words, never on substrings, see
:func:`is_secret_name`; or by its **shape**, wherever it appears: ``sk-...``,
``hf_...``, ``ghp_...`` and other provider key formats, ``Bearer ...``, user:password
in a URL, the value after a secret-named flag (``--api-key X``, ``--token=X``). A
sample's prompt and output are redacted by shape only (:func:`redact_shapes`), with a
random-looking body required, so ordinary model output words are kept.
Numbers, booleans and ``null`` are never redacted by name: ``max_tokens: 8`` is
evidence, not a secret.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"
MIN_LITERAL = 6  # shorter known values are not replaced as literals (too many false hits)

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
# Words that make any name secret.
_ALWAYS = frozenset({
    "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE", "PASS",
    "APIKEY", "APIKEYS", "AUTH", "AUTHORIZATION", "CREDENTIAL", "CREDENTIALS", "CREDS",
    "COOKIE", "PRIVATEKEY",
})
# KEY is secret as the last word after one of these (API_KEY, PRIVATE_KEY); a bare
# "key" (a sample's key, a cache key) is not.
_KEY_KINDS = frozenset({
    "API", "PRIVATE", "ACCESS", "SECRET", "SIGNING", "ENCRYPTION", "AUTH", "CLIENT",
    "MASTER", "SESSION", "SSH", "SERVICE", "ACCOUNT", "LICENSE", "HMAC", "SHARED",
})
# TOKEN is secret as the last word (HF_TOKEN, ACCESS_TOKEN, --token), except a
# vocabulary token (EOS_TOKEN, FIRST_TOKEN). TOKENS (max_tokens) is never secret.
_TOKEN_KINDS = frozenset({
    "BOS", "EOS", "PAD", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "START", "END", "STOP",
    "FIRST", "LAST", "NEXT", "PREV", "OUTPUT", "INPUT", "PROMPT", "PER", "EACH", "NEW",
    "SINGLE", "DECODE", "PREFILL", "CONTROL", "IMAGE", "AUDIO", "VIDEO", "THINK",
    "REFERENCE", "CURRENT", "EXPECTED", "ACTUAL", "GENERATED", "SAMPLED", "TOP", "TARGET",
    "DRAFT",
})
# A last word that names where a secret is, not the secret (API_KEY_ENV, TOKEN_FILE).
_REFERENCE = frozenset({
    "ENV", "VAR", "VARS", "FILE", "PATH", "DIR", "NAME", "ID", "IDS", "TYPE", "KIND",
    "LEN", "LENGTH", "COUNT", "SIZE",
})

_NOT_IDENT = r"(?<![A-Za-z0-9_-])"
_SHAPES = re.compile("|".join([
    _NOT_IDENT + r"sk-[A-Za-z0-9_-]{20,}",                  # OpenAI, Anthropic (sk-ant-)
    _NOT_IDENT + r"hf_[A-Za-z0-9]{20,}",                    # Hugging Face
    _NOT_IDENT + r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",  # GitHub
    _NOT_IDENT + r"github_pat_[A-Za-z0-9_]{20,}",
    _NOT_IDENT + r"glpat-[A-Za-z0-9_-]{20,}",               # GitLab
    _NOT_IDENT + r"xox[abposr]-[A-Za-z0-9-]{10,}",          # Slack
    _NOT_IDENT + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])",  # AWS access key id
    _NOT_IDENT + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
    # a Slack incoming webhook: the URL is the credential (T.../B.../secret)
    r"(?<=hooks\.slack\.com/services/)T[A-Za-z0-9]{6,}/B[A-Za-z0-9]{6,}/[A-Za-z0-9]{16,}",
]))
# A token's random part mixes character classes; a word of model output that happens to
# start like one ("sk-learn-style-pipelines", "hf_transformers_models") does not.
_CLASSES = (re.compile(r"[a-z]"), re.compile(r"[A-Z]"), re.compile(r"[0-9]"))
_AUTH_SCHEME = re.compile(
    r"\b(?P<scheme>[Bb]earer)\s+(?!<redacted>)[A-Za-z0-9._~+/=-]+"
    r"|\b(?P<basic>Basic)\s+(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}")
# user:password@ up to the authority's last '@' (a password may hold a raw '@')
_URL_USERINFO = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#'\"]+@")
# --flag VALUE, --flag=VALUE, '--flag', 'VALUE' (a printed Python list), "--flag", "VALUE"
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])--?[A-Za-z][\w.-]*)(?P<sep>=|['\"]?(?:,\s*|\s+)['\"]?)"
    r"(?P<value>(?!-|\{\w+\})[^\s'\",;&}\]]+)")
# NAME=VALUE, NAME: VALUE, "name": "value", 'name': 'value' (no space before = or :)
_NAME_VALUE = re.compile(
    r"(?P<name>(?<![\w.-])[A-Za-z_][\w.-]*)(?P<sep>['\"]?(?:=|:\s*)['\"]?)"
    r"(?P<value>(?:[Bb]earer\s+|Basic\s+)?(?!//|\{\w+\})[^\s'\",;&?}\]]+)")


def _random_looking(token: str) -> bool:
    body = re.sub(r"^(?:sk-(?:proj-|ant-|svcacct-)?|hf_|gh[pousr]_|github_pat_|glpat-|"
                  r"xox[abposr]-)", "", token)
    return sum(bool(c.search(body)) for c in _CLASSES) >= 2


def redact_shapes(text: str) -> str:
    """``text`` (a sample's prompt or output) with only the token-shaped secrets
    replaced, each one's random part required to mix letters and digits or cases, so a
    model's ordinary words are kept; no name-based redaction (``pass: 3`` is an answer)."""
    return _SHAPES.sub(lambda m: REDACTED if _random_looking(m[0]) else m[0], text)


def redact_sample_texts(obj: Any) -> Any:
    """A sample line with :func:`redact_shapes` applied to every string in it."""
    if isinstance(obj, str):
        return redact_shapes(obj)
    if isinstance(obj, Mapping):
        return {k: redact_sample_texts(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_sample_texts(v) for v in obj]
    return obj


def _words(name: str) -> list[str]:
    words = [w.upper() for w in _WORD.findall(name)]
    while words and words[-1].isdigit():  # OPENAI_API_KEY_2
        words.pop()
    return words


@functools.lru_cache(maxsize=4096)  # a pure function of the name; every key of every record
def is_secret_name(name: str) -> bool:
    """Whether a value named ``name`` (env var, flag, key, header) must not be recorded.

    Whole words only: ``OPENAI_API_KEY``, ``apiKey``, ``HF_TOKEN``, ``--token``,
    ``DB_PASSWORD``, ``Authorization`` are secret; ``max_tokens``, ``--max-tokens``,
    ``n_tokens``, ``tokenizer``, ``eos_token``, ``max_model_len``, ``cache_key`` and
    ``api_key_env`` (it names a variable, it is not the key) are not.
    """
    words = _words(name)
    if not words or (len(words) > 1 and words[-1] in _REFERENCE):
        return False
    if any(w in _ALWAYS for w in words):
        return True
    last = words[-1]
    before = words[-2] if len(words) > 1 else None
    if last in ("KEY", "KEYS"):
        return before in _KEY_KINDS
    if last == "TOKEN":
        return before not in _TOKEN_KINDS
    return False


_KNOWN: set[str] = set()  # secret values this process was given (see add_known_secrets)


def add_known_secrets(values: Iterable[str | None]) -> None:
    """Values known to be secret in this process (the key named by ``--api-key-env``,
    the values of secret-named variables): from now on every redaction replaces them
    wherever they appear, an error text a server echoed them into included."""
    _KNOWN.update(v for v in values if v and len(v) >= MIN_LITERAL and v != REDACTED)


def _literals(secrets: Iterable[str]) -> list[str]:
    return sorted({s for s in (*secrets, *_KNOWN) if len(s) >= MIN_LITERAL and s != REDACTED},
                  key=len, reverse=True)


def redact_url(url: str) -> str:
    """``http://user:pass@host:8000/v1`` -> ``http://<redacted>@host:8000/v1``; the
    query string is redacted by name (``?api_key=...``)."""
    return redact_text(url)


def _sub_flag(m: re.Match[str]) -> str:
    if not is_secret_name(m["flag"]) or m["value"] == REDACTED:
        return m[0]
    return f"{m['flag']}{m['sep']}{REDACTED}"


# In prose, "pass: x" is a gate passing ("gates pass: accuracy"), not a password: the
# bare word PASS makes a name secret as NAME=VALUE, a flag or a key, never as "pass: x".
_PROSE = frozenset({"pass"})


def _sub_name(m: re.Match[str]) -> str:
    if not is_secret_name(m["name"]) or REDACTED in m["value"]:
        return m[0]
    if m["name"].lower() in _PROSE and m["sep"].startswith(":"):
        return m[0]
    return f"{m['name']}{m['sep']}{REDACTED}"


def _sub_auth(m: re.Match[str]) -> str:
    return f"{m['scheme'] or m['basic']} {REDACTED}"


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text (a log, a command string, an error message) with every secret
    replaced: the known ``secrets`` as literals, then the shapes, URL credentials,
    secret-named flags' values and ``NAME=VALUE`` / ``name: value`` pairs."""
    literals = tuple(_literals(secrets))
    if len(text) <= _CACHED_LEN:
        return _redacted_short(text, literals)
    return _redacted(text, literals)


# A record is written and read many times over a run, and most of its strings are short
# (keys' values, paths, hashes): their redactions are remembered, keyed by the text and
# every literal in force (the known secrets included, so a secret learnt later is
# applied). Longer texts (outputs, logs) are redacted each time, and not kept.
_CACHED_LEN = 512


@functools.lru_cache(maxsize=16384)
def _redacted_short(text: str, literals: tuple[str, ...]) -> str:
    return _redacted(text, literals)


def _redacted(text: str, literals: tuple[str, ...]) -> str:
    for literal in literals:
        text = text.replace(literal, REDACTED)
    if not text:
        return text
    text = _SHAPES.sub(REDACTED, text)
    text = _AUTH_SCHEME.sub(_sub_auth, text)
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _FLAG_VALUE.sub(_sub_flag, text)
    return _NAME_VALUE.sub(_sub_name, text)


def _argv_word(arg: str, secrets: Sequence[str]) -> str:
    """One word: ``NAME=VALUE`` by name (``--env HF_TOKEN=x``), else as free text."""
    name, eq, value = arg.partition("=")
    if eq and not arg.startswith("-") and re.fullmatch(r"[\w.-]+", name):
        if is_secret_name(name) and value:
            return f"{name}={REDACTED}"
        return f"{name}={redact_text(value, secrets)}"
    # a URL with a query (http://u:p@h/?token=x), a command: free text
    return redact_text(arg, secrets)


def _argv(argv: Iterable[str], secrets: Sequence[str]) -> tuple[list[str], list[str]]:
    """The argv as recorded, and the values it hid."""
    out: list[str] = []
    hidden: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hidden.append(arg)
            hide_next = False
            continue
        hide_next = False
        flag, eq, value = arg.partition("=")
        if arg.startswith("-") and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
                hidden.append(value)
            else:
                out.append(arg)
                hide_next = True
            continue
        if arg.startswith("-") and eq:  # --env=HF_TOKEN=x
            out.append(f"{flag}={_argv_word(value, secrets)}")
            continue
        out.append(_argv_word(arg, secrets))
    return out, hidden


def redact_argv(argv: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """A command line as recorded: the word after a secret-named flag (``--api-key X``,
    ``--token=X``), the value of a secret-named ``NAME=VALUE`` word (``--env
    HF_TOKEN=x``), and secrets inside any word (a ``--launch`` command, a URL) are
    replaced; every other word, ``--max-tokens 8`` included, is kept."""
    return _argv(argv, _literals(secrets))[0]


def argv_secrets(argv: Iterable[str]) -> list[str]:
    """The values :func:`redact_argv` hides by position (to scrub them from logs)."""
    return _argv(argv, ())[1]


def env_secrets(env: Mapping[str, str | None]) -> list[str]:
    """The values of secret-named variables in ``env`` (to scrub them from logs)."""
    return [v for k, v in env.items() if v and is_secret_name(k)]


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env``: values of secret names are ``<redacted>``, others are kept
    except for secret-shaped parts (``HF_HUB_X=hf_...``)."""
    return {k: (REDACTED if is_secret_name(k) else redact_text(v)) for k, v in env.items()}


def _blank(value: Any) -> Any:
    """Everything textual under a secret name (a list of keys, a nested dict)."""
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, Mapping):
        return {k: _blank(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_blank(v) for v in value]
    return value


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A JSON-like document with secrets removed, recursively: a string value under a
    secret name (``{"api_key": ...}``, an ``Authorization`` header) is ``<redacted>``;
    lists of strings are treated as command lines (:func:`redact_argv`); every other
    string as free text (:func:`redact_text`). Numbers and booleans are kept."""
    return _redact(obj, _literals(secrets))


def _redact(obj: Any, secrets: Sequence[str]) -> Any:
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, Mapping):
        return {k: (_blank(v) if isinstance(k, str) and is_secret_name(k)
                    else _redact(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if obj and all(isinstance(x, str) for x in obj):
            return _argv(obj, secrets)[0]
        return [_redact(x, secrets) for x in obj]
    return obj


def redacted_paths(obj: Any, where: str = "") -> list[str]:
    """Where ``obj`` holds a redacted value (``env.HF_TOKEN``): a config read back from
    a record cannot be run again with those."""
    if isinstance(obj, str):
        return [where or "value"] if REDACTED in obj else []
    if isinstance(obj, Mapping):
        return [p for k, v in obj.items() for p in redacted_paths(v, f"{where}.{k}".strip("."))]
    if isinstance(obj, list | tuple):
        return [p for i, v in enumerate(obj) for p in redacted_paths(v, f"{where}[{i}]")]
    return []
