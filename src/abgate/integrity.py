"""Tamper evidence for a record document (``baseline.json``): a content digest, as a
manifest has, and per-part digests so that a refusal names what changed.

:func:`seal` adds ``integrity``: ``digest``, the ``sha256:`` of the canonical JSON of
the document as it will be written (secrets redacted, as
:func:`abgate.runner.documents.write_json_atomic` writes it) without ``integrity`` itself,
and ``parts``: one digest per top-level field and, for a field holding an object or a
list, per member (``config.engine_args``, ``cases[1]``).

:func:`verify_file` checks the file on disk, before anything is redacted or migrated:
its bytes must be exactly abgate's serialization of what they parse to (so a second
copy of a key, reformatting or an escape written otherwise is an edit too), and the
digest is recomputed over that content as it is, nothing redacted (so an edit inside a
redacted value, ``<redacted>`` turned into anything else, is an edit). A document
without a seal, or whose bytes no longer match it, is a one-line
:class:`~abgate.errors.UsageError` naming the file and the changed parts. A hand edit
cannot be told from damage, and either is refused. A seal is no signature: anyone can
recompute it (``docs/signing.md``).

Seals written before version 2 were checked over the content redacted again on read
(blind to an edit inside a redacted value); a file that was not edited verifies under
today's rules too (its content was written redacted). :func:`verify_old_rules` is the
check ``abgate baseline upgrade`` runs on such a seal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.errors import UsageError
from abgate.identity import digest_json
from abgate.records.sections import Section
from abgate.redact import redact

FIELD = "integrity"
VERSION = 2
ALGORITHM = ("sha256 of canonical JSON without 'integrity', of the content as written "
             "(nothing redacted on read); the file's bytes are abgate's serialization of it")


class IntegritySection(Section):
    """A document's ``integrity`` as read: its digest, and the per-part digests a refusal
    names the changed parts by (anything else when damaged: then none are named)."""

    digest: str
    parts: Any = None  # {part: digest} as :func:`seal` writes it

    @property
    def part_digests(self) -> dict[str, str] | None:
        return self.parts if isinstance(self.parts, dict) else None


def record_text(doc: Any) -> str:
    """The text abgate writes for the JSON document ``doc`` (as
    :func:`abgate.runner.documents.write_json_atomic` does, after redaction)."""
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _body(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != FIELD}


def _parts(body: dict[str, Any]) -> dict[str, str]:
    parts: dict[str, str] = {}
    for key, value in body.items():
        parts[key] = digest_json(value)
        if isinstance(value, dict):
            parts |= {f"{key}.{k}": digest_json(v) for k, v in value.items()}
        elif isinstance(value, list):
            parts |= {f"{key}[{i}]": digest_json(v) for i, v in enumerate(value)}
    return parts


def seal(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``integrity`` section, computed over what will be written (the
    content redacted, as the writer redacts it)."""
    body = redact(_body(doc))
    assert isinstance(body, dict)
    return {**doc, FIELD: {"version": VERSION, "algorithm": ALGORITHM,
                           "digest": digest_json(body), "parts": _parts(body)}}


def sealed_text(doc: dict[str, Any]) -> str:
    """The file abgate writes for ``doc`` sealed (for tests and tools writing one)."""
    sealed = redact(seal(doc))
    return record_text(sealed)


def changed_parts(recorded: dict[str, str], body: dict[str, Any]) -> list[str]:
    """The most specific parts whose digest differs (added and removed ones included)."""
    now = _parts(body)
    diff = sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
    # a changed member names itself; its parent is listed only when no member is
    return [k for k in diff if not any(d != k and (d.startswith(k + ".")
                                                    or d.startswith(k + "[")) for d in diff)]


def _section(path: Path, doc: dict[str, Any]) -> IntegritySection:
    try:  # an object with a digest string
        return IntegritySection.model_validate(doc.get(FIELD), strict=True)
    except ValidationError:
        raise UsageError(f"{path}: no '{FIELD}' digest: incomplete, or recorded by an abgate "
                         "without tamper-evident baselines ('abgate baseline upgrade' "
                         "re-seals one that was never sealed); record it again") from None


def _digest(path: Path, body: Any) -> str:
    try:
        return digest_json(body)
    except ValueError:  # NaN or Infinity: never written by abgate (canonical JSON)
        raise UsageError(f"{path}: holds a number that is not JSON (NaN or Infinity): "
                         f"damaged or edited; refusing it") from None


def _mismatch(path: Path, section: IntegritySection, body: dict[str, Any]) -> UsageError:
    parts = section.part_digests
    changed = changed_parts(parts, body) if parts is not None else []
    named = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8
                                      else "")
    return UsageError(f"{path}: content does not match its '{FIELD}' digest (edited or "
                      f"damaged since it was recorded): {named or 'the seal itself'}; "
                      "refusing it")


def verify_seal(path: Path, doc: dict[str, Any]) -> None:
    """Refuse ``doc`` (parsed from ``path``, nothing redacted) unless its content, as it
    is, matches its seal. :func:`verify_file` also checks the bytes; prefer it."""
    section = _section(path, doc)
    body = _body(doc)
    if _digest(path, body) != section.digest:
        raise _mismatch(path, section, body)


def _first_difference(raw: str, expected: str) -> int:
    """The 1-based line of the first character where ``raw`` and ``expected`` differ."""
    n = next((i for i, (a, b) in enumerate(zip(raw, expected, strict=False)) if a != b),
             min(len(raw), len(expected)))
    return raw.count("\n", 0, n) + 1


def parse_bytes(path: Path, data: bytes) -> dict[str, Any]:
    """The JSON object in ``data`` (read from ``path``); anything else is a one-line error."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return doc


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: not found") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None


def verify_file(path: Path) -> dict[str, Any]:
    """The sealed document in ``path``, after checking the bytes on disk against its
    seal, before anything is redacted: any edit is a one-line UsageError naming the
    file and the part (a changed field, or the line where the bytes stop being what
    abgate wrote)."""
    data = read_bytes(path)
    doc = parse_bytes(path, data)
    verify_seal(path, doc)
    raw = data.decode("utf-8")
    expected = record_text(doc)
    if raw != expected:
        line = _first_difference(raw, expected)
        raise UsageError(f"{path}:{line}: the file's bytes are not what abgate wrote for "
                         "its content (reformatted, a key written twice, or text escaped "
                         "otherwise: edited since it was recorded); refusing it")
    return doc


def verify_old_rules(path: Path, doc: dict[str, Any]) -> None:
    """A seal written before version 2, for ``abgate baseline upgrade``: the digest over
    the content as it is (what the old writer hashed: it wrote the content redacted), the
    bytes not compared (an older abgate may have formatted them otherwise). A seal that
    matches only with the content redacted again (the old reader's check) is refused: a
    redacted value was edited after it was recorded."""
    section = _section(path, doc)
    body = _body(doc)
    if _digest(path, body) == section.digest:
        return
    again = redact(body)
    if isinstance(again, dict) and _digest(path, again) == section.digest:
        parts = section.part_digests
        named = ", ".join(changed_parts(parts, body)) if parts is not None else ""
        raise UsageError(f"{path}: its old seal matches only with secrets redacted again: "
                         f"a redacted value was edited since it was recorded "
                         f"({named or 'a redacted value'}); refusing it")
    raise _mismatch(path, section, body)
