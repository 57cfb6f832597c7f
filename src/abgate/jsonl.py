"""Reading a JSONL file of objects written by someone else (a dataset, another tool's
log): one line, one JSON object; every problem is a one-line :class:`UsageError`
naming ``file:line``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.safejson import MAX_BYTES, BadJson, parse, read_bytes


def json_objects(path: Path, max_bytes: int = MAX_BYTES) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path`` (each line through
    the guarded :func:`abgate.safejson.parse`; a file past ``max_bytes`` refused)."""
    data = read_bytes(path, max_bytes=max_bytes)
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}:{lineno}: not UTF-8 text (bad byte at column "
                             f"{exc.start + 1})") from None
        if not line.strip():
            continue
        try:
            record = parse(line)
        except BadJson as exc:
            raise UsageError(f"{path}:{lineno}: {exc.reason}") from None
        if not isinstance(record, dict):
            raise UsageError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, record
