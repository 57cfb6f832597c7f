"""The JSON Lines files abgate appends to (``samples.jsonl``, ``agreement.jsonl``,
``decisions.jsonl``, ``attachments.jsonl``): one rule for a torn last line.

Each line is written with its newline in one write and fsynced, so a crash mid-write
leaves at most one torn line, at the end. Before anything is appended to such a file,
:func:`repair_torn` cuts that torn tail off, after appending the cut bytes to
``<file>.torn`` beside it (fsynced, so nothing is lost) and logging a warning (into
``run.log`` during a run). The next line then starts on a line of its own, never glued
onto the torn one. Readers ignore the same tail (:func:`torn_start`); a bad line before
it is corruption, refused by the reader.

The torn tail is the bytes after the last newline when they are not blank; else, when
the file ends in a newline, its last non-blank line if that is not a JSON object.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from abgate import safefs
from abgate.errors import AbgateError

TORN_SUFFIX = ".torn"
log = logging.getLogger("abgate.records")


def _is_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def torn_start(data: bytes) -> int | None:
    """The offset where the torn tail of ``data`` begins; None when it ends in whole
    lines (blank lines alone are no tear)."""
    pos = data.rfind(b"\n") + 1
    if data[pos:].strip():
        return pos
    body = data[:pos].rstrip()
    if not body:
        return None
    start = body.rfind(b"\n") + 1
    return None if _is_object(body[start:]) else start


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd`` (a short write is continued), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def repair_torn(path: Path) -> bytes:
    """Cut the torn tail off ``path`` (a missing file has none), its bytes kept first in
    ``<path>.torn``; the bytes cut (empty when there were none). Never through a link."""
    try:
        fd = safefs.open_fd(path, os.O_RDONLY)  # a link or a FIFO: refused, never read
    except FileNotFoundError:
        return b""
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise AbgateError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    start = torn_start(data)
    if start is None:
        return b""
    torn = data[start:]
    side = path.with_name(path.name + TORN_SUFFIX)
    try:
        fd = safefs.open_append(side)
        try:
            write_all(fd, torn if torn.endswith(b"\n") else torn + b"\n")
        finally:
            os.close(fd)
        safefs.truncate(path, start)
    except OSError as exc:
        raise AbgateError(f"{path}: cannot cut its torn last line "
                          f"({exc.strerror or exc})") from exc
    log.warning("%s: cut a torn last line (%d bytes, from a write cut off by a crash); "
                "its bytes are kept in %s", path, len(torn), side.name)
    return torn


def append_line(path: Path, line: bytes) -> None:
    """Append one line (``line`` ends in a newline) to ``path`` after repairing a torn
    tail, fsynced with its directory; never through a link."""
    repair_torn(path)
    try:
        fd = safefs.open_append(path)
        try:
            write_all(fd, line)
        finally:
            os.close(fd)
        safefs.fsync_dir(path.parent)
    except OSError as exc:
        raise AbgateError(f"{path}: cannot append ({exc.strerror or exc})") from exc
