"""One writer per directory: an exclusive ``flock`` on ``<dir>/.abgate.lock``.

``abgate run``, ``ab``, ``bench``, ``baseline record`` and every ``--resume`` / ``--force``
hold the lock of their output directory for the whole write. The kernel releases it
when the holder dies (even by SIGKILL), so a stale lock never blocks a resume. The
lock file names its holder (pid and command line, secrets redacted); a second writer
is refused in one line naming them, before it writes anything.

The lock file itself is never deleted (not even by ``--force``): a second process
that opened the old file would otherwise lock a different inode than the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from abgate.errors import UsageError
from abgate.redact import redact_text
from abgate.safejson import parse

LOCK_FILE = ".abgate.lock"
_HELD: dict[Path, int] = {}  # directories this process holds -> nesting depth


def _holder(fd: int) -> str:
    """Who holds the lock, as its lock file says (it may not have written it yet)."""
    try:
        raw = os.pread(fd, 65536, 0).decode("utf-8", "replace")
        doc = parse(raw)
        return f"pid {doc['pid']} ({doc['command']})"
    except (OSError, ValueError, KeyError, TypeError):  # BadJson is a ValueError
        return "another process (it has not written its pid yet)"


def _note_holder(fd: int) -> None:
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("abgate", "__main__.py"):  # python -m abgate
        argv[0] = "abgate"
    doc = {"pid": os.getpid(), "command": redact_text(shlex.join(argv)),
           "since": time.time()}
    data = (json.dumps(doc) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s writer lock for the block (the directory is created if
    missing). Another holder is a UsageError naming its pid and command. Nested
    claims of the same directory by this process share the one lock."""
    key = directory.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot write to output directory {directory}: "
                         f"{exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{directory} is being written by {_holder(fd)}; one writer per "
                             "directory: wait for it to end (or stop it), then resume"
                             ) from None
        with contextlib.suppress(OSError):  # the pid is a courtesy; the flock is the lock
            _note_holder(fd)
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]
    finally:
        os.close(fd)  # releases the lock
