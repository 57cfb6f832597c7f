"""Reading a JSONL file of objects written by someone else (a dataset, another tool's
log): one line, one JSON object; every problem is a one-line :class:`UsageError`
naming ``file:line``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from abgate.errors import UsageError


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}:{lineno}: not UTF-8 text (bad byte at column "
                             f"{exc.start + 1})") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise UsageError(f"{path}:{lineno}: JSON nested too deeply") from None
        if not isinstance(record, dict):
            raise UsageError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, record
