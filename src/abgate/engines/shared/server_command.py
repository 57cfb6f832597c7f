"""A launched server's command line: the ``--launch`` template filled (``{port}``,
``{model}``, ``{host}``, ``{api_key}``), ``--engine-arg`` pairs as server flags in the
server's boolean style, the argv as the record shows it (secrets redacted), and a
short name for its log file."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.engines.shared.server_cleanup import HOST
from abgate.errors import UsageError
from abgate.redact import REDACTED, redact_argv

PLACEHOLDERS = ("{port}", "{model}", "{host}", "{api_key}")


def arg_flags(args: Mapping[str, Any], bool_style: str) -> list[str]:
    """``--engine-arg`` pairs as server flags: ``--key value``.

    Booleans: ``bool_style="flag"`` gives ``--key`` / ``--no-key`` (vLLM's convention);
    ``"value"`` gives ``--key true`` / ``--key false`` (``llama_cpp.server``). Lists
    become one flag followed by each item; objects are passed as JSON; ``null`` omits
    the flag. Keys are used as written (vLLM and SGLang use dashes, llama_cpp.server
    underscores).
    """
    out: list[str] = []
    for key, value in args.items():
        flag = f"--{key}"
        if value is None:
            continue
        if isinstance(value, bool):
            if bool_style == "value":
                out += [flag, "true" if value else "false"]
            else:
                out.append(flag if value else f"--no-{key}")
        elif isinstance(value, list | tuple):
            out += [flag, *(_scalar(v) for v in value)]
        else:
            out += [flag, _scalar(value)]
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def detect_bool_style(argv: Sequence[str]) -> str:
    """``value`` for llama_cpp.server (its booleans take an argument), else ``flag``."""
    return "value" if any("llama_cpp.server" in a for a in argv) else "flag"


def build_command(template: str, *, port: int, model: str, args: Mapping[str, Any],
                  bool_style: str = "auto",
                  api_key: str | None = None) -> tuple[list[str], list[str]]:
    """The argv to run and the argv to record (the API key, secret-named flags' values
    and secret-shaped words redacted, see :mod:`abgate.redact`).

    ``{port}`` is required; ``{model}``, ``{host}`` and ``{api_key}`` are optional.
    Placeholders are replaced textually, so JSON braces elsewhere are left alone.
    """
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"--launch: cannot split the command: {exc}") from None
    if not words:
        raise UsageError("--launch: empty command")
    if not any("{port}" in w for w in words):
        raise UsageError("--launch: the command must contain {port} (abgate picks a free "
                         "loopback port)")
    if not model and any("{model}" in w for w in words):
        raise UsageError("--launch uses {model} but no --model was given")
    if api_key is None and any("{api_key}" in w for w in words):
        raise UsageError("--launch uses {api_key} but no --api-key-env was given")
    style = detect_bool_style(words) if bool_style == "auto" else bool_style
    flags = arg_flags(args, style)

    def fill(word: str, key: str) -> str:
        return (word.replace("{port}", str(port)).replace("{model}", model)
                .replace("{host}", HOST).replace("{api_key}", key))

    run = [fill(w, api_key or "") for w in words] + flags
    shown = redact_argv([fill(w, REDACTED) for w in words] + flags, [api_key or ""])
    return run, shown


def server_name(argv: Sequence[str]) -> str:
    """A short name for log files: the ``-m`` module's package, the script run by
    Python, or the program name; only ``[A-Za-z0-9._-]``, so the log stays in the run
    directory whatever the command."""
    prog = Path(argv[0]).name
    name = prog
    if prog.startswith("python") and "-m" in argv[:-1]:  # (llama-server's -m is its model)
        name = argv[argv.index("-m") + 1].split(".")[0]
    elif prog.startswith("python") and len(argv) > 1 and not argv[1].startswith("-"):
        name = Path(argv[1]).stem
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "server"
