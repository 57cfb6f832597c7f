"""One writer per directory: an exclusive ``flock`` on ``<dir>/.abgate.lock``.

``abgate run``, ``ab``, ``bench``, ``baseline record`` and every ``--resume`` / ``--force``
hold the lock of their output directory for the whole write. The kernel releases it
when the holder dies (even by SIGKILL), so a stale lock never blocks a resume. The
lock file names its holder (pid and command line, secrets redacted); a second writer
is refused in one line naming them, before it writes anything.

The lock covers the records nested in its directory too (an A/B's ``arms/<arm>``):
see :mod:`abgate.nestlock`. The lock file is opened never through a link
(:mod:`abgate.safefs`): a symlinked ``.abgate.lock`` is refused, naming it.

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

from abgate import nestlock, safefs
from abgate.errors import UsageError
from abgate.nestlock import LOCK_FILE as LOCK_FILE
from abgate.nestlock import holder
from abgate.records.side_documents import LockHolder
from abgate.redact import redact_text

_HELD: dict[Path, int] = {}  # directories this process holds -> nesting depth


def _note_holder(fd: int) -> None:
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("abgate", "__main__.py"):  # python -m abgate
        argv[0] = "abgate"
    doc = LockHolder(pid=os.getpid(), command=redact_text(shlex.join(argv)), since=time.time())
    data = (json.dumps(doc.model_dump()) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def check_outer_writer(directory: Path) -> None:
    """Refuse ``directory`` now (writing nothing) when a record it is inside is being
    written by another process: the early form of :func:`exclusive`'s own check, for
    commands that load an engine before they lock their directory."""
    with contextlib.ExitStack() as stack:
        nestlock.share_ancestors(directory, directory.resolve(), set(_HELD), stack)


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s writer lock for the block (the directory is created if
    missing). Another holder is a UsageError naming its pid and command, and so is a
    writer of a record this one is inside or of one inside it (:mod:`abgate.nestlock`).
    Nested claims of the same directory by this process share the one lock."""
    key = directory.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    with contextlib.ExitStack() as stack:
        nestlock.share_ancestors(directory, key, set(_HELD), stack)  # before creating it
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = safefs.open_fd(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise UsageError(f"cannot write to output directory {directory}: "
                             f"{exc.strerror or exc}") from None
        stack.callback(os.close, fd)  # closing it releases the lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            nestlock.refuse_inner_writer(directory, fd, set(_HELD))
            raise UsageError(f"{directory} is being written by {holder(fd)}; one writer per "
                             "directory: wait for it to end (or stop it), then resume"
                             ) from None
        nestlock.refuse_inner_writer(directory, None, set(_HELD))
        with contextlib.suppress(OSError):  # the pid is a courtesy; the flock is the lock
            _note_holder(fd)
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]
