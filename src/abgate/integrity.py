"""Tamper evidence for a record document (``baseline.json``): a content digest, as a
manifest has, and per-part digests so that a refusal names what changed.

:func:`seal` adds ``integrity``: ``digest``, the ``sha256:`` of the canonical JSON of
the document as written (secrets redacted, see :func:`abgate.runner.records.write_json_atomic`)
without ``integrity`` itself, and ``parts``: one digest per top-level field and, for a
field holding an object or a list, per member (``config.engine_args``, ``cases[1]``).
:func:`verify_seal` recomputes both; a document without a seal, or whose content no
longer matches it, is a one-line :class:`~abgate.errors.UsageError` naming the file
and the changed parts. A hand edit cannot be told from damage, and either is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.identity import digest_json
from abgate.redact import redact

FIELD = "integrity"


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    body = redact({k: v for k, v in doc.items() if k != FIELD})
    assert isinstance(body, dict)
    return body


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
    """``doc`` with its ``integrity`` section (computed over what will be written)."""
    body = _content(doc)
    return {**doc, FIELD: {"algorithm": "sha256 of canonical JSON without 'integrity'",
                           "digest": digest_json(body), "parts": _parts(body)}}


def changed_parts(recorded: dict[str, str], body: dict[str, Any]) -> list[str]:
    """The most specific parts whose digest differs (added and removed ones included)."""
    now = _parts(body)
    diff = sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
    # a changed member names itself; its parent is listed only when no member is
    return [k for k in diff if not any(d != k and (d.startswith(k + ".")
                                                    or d.startswith(k + "[")) for d in diff)]


def verify_seal(path: Path, doc: dict[str, Any]) -> None:
    """Refuse ``doc`` (read from ``path``) unless its content matches its seal."""
    section = doc.get(FIELD)
    if not isinstance(section, dict) or not isinstance(section.get("digest"), str):
        raise UsageError(f"{path}: no '{FIELD}' digest: incomplete, or recorded by an abgate "
                         "without tamper-evident baselines; record it again")
    body = _content(doc)
    try:
        if digest_json(body) == section["digest"]:
            return
    except ValueError:  # NaN or Infinity: never written by abgate (canonical JSON)
        raise UsageError(f"{path}: holds a number that is not JSON (NaN or Infinity): "
                         f"damaged or edited; refusing it") from None
    parts = section.get("parts")
    changed = changed_parts(parts, body) if isinstance(parts, dict) else []
    named = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8
                                      else "")
    raise UsageError(f"{path}: content does not match its '{FIELD}' digest (edited or "
                     f"damaged since it was recorded): {named or 'the seal itself'}; "
                     "refusing it")
