"""One writer per directory: an exclusive ``flock`` on ``<dir>/.abgate.lock``.

``abgate run``, ``ab``, ``bench``, ``baseline record`` and every ``--resume`` / ``--force``
hold the lock of their output directory for the whole write. The kernel releases it
when the holder dies (even by SIGKILL), so a stale lock never blocks a resume. The
lock file names its holder (pid and command line, secrets redacted); a second writer
is refused in one line naming them, before it writes anything.

The lock covers the records nested in its directory too (an A/B's ``arms/<arm>``: see
below). The lock file is opened never through a link (:mod:`abgate.safefs`): a
symlinked ``.abgate.lock`` is refused, naming it.

The lock file itself is never deleted (not even by ``--force``): a second process
that opened the old file would otherwise lock a different inode than the first.

**Nested records.** An A/B writes its arms' records in ``AB/arms/<arm>``; a writer of
any directory under a locked record (``abgate run -o AB/arms/b --force``, a bench, a
resume) would delete or append to records the A/B is writing. So a writer, before it
creates or locks its own directory, takes a *shared* ``flock`` on the ``.abgate.lock``
of every ancestor that has one (a regular file, never through a link; no lock file is
ever created in an ancestor) and holds them for its whole write:

- an ancestor held by another writer (exclusively) refuses this one, in one line
  naming the locked ancestor and its holder (pid and command);
- while this one writes, a writer of such an ancestor fails to take its exclusive
  lock and is refused in one line naming this inner directory and its holder.

A writer also looks, right after taking its lock, for the lock files of directories
below its own (up to :data:`DEPTH` levels, links not followed) held by another writer,
so an ancestor without a lock file yet is covered too. Directories this process
already holds are its own and skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from abgate import safefs
from abgate.errors import UsageError
from abgate.records.side_documents import LockHolder
from abgate.redact import redact_text
from abgate.safejson import parse

LOCK_FILE = ".abgate.lock"
DEPTH = 4  # directory levels looked into below a locked directory
MAX_ENTRIES = 20000  # entries looked at below it (a huge tree is not scanned whole)
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
        share_ancestors(directory, directory.resolve(), set(_HELD), stack)


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s writer lock for the block (the directory is created if
    missing). Another holder is a UsageError naming its pid and command, and so is a
    writer of a record this one is inside or of one inside it (below).
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
        share_ancestors(directory, key, set(_HELD), stack)  # before creating it
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
            refuse_inner_writer(directory, fd, set(_HELD))
            raise UsageError(f"{directory} is being written by {holder(fd)}; one writer per "
                             "directory: wait for it to end (or stop it), then resume"
                             ) from None
        refuse_inner_writer(directory, None, set(_HELD))
        with contextlib.suppress(OSError):  # the pid is a courtesy; the flock is the lock
            _note_holder(fd)
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]


def holder(fd: int) -> str:
    """Who holds the lock, as its lock file says (it may not have written it yet)."""
    try:
        raw = os.pread(fd, 65536, 0).decode("utf-8", "replace")
        doc = LockHolder.model_validate(parse(raw))
        return f"pid {doc.pid} ({doc.command})"
    except (OSError, ValueError):  # a pydantic ValidationError is a ValueError
        return "another process (it has not written its pid yet)"


def _open_existing(lock: Path) -> int | None:
    """A read-only descriptor of an existing regular lock file, else None."""
    try:
        if not stat.S_ISREG(os.lstat(lock).st_mode):
            return None
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def share_ancestors(directory: Path, key: Path, held: set[Path],
                    stack: contextlib.ExitStack) -> None:
    """Take (and keep on ``stack``) a shared lock on each ancestor's lock file;
    an ancestor another writer holds is a UsageError naming it and its holder."""
    for parent in key.parents:
        if parent in held:
            continue
        fd = _open_existing(parent / LOCK_FILE)
        if fd is None:
            continue
        stack.callback(os.close, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{directory} is inside {parent}, which is being written by "
                             f"{holder(fd)}; the records inside it are its writer's: wait "
                             "for it to end (or stop it), or choose a directory outside it"
                             ) from None


def _locks_below(root: Path, depth: int, budget: list[int]) -> Iterator[Path]:
    if depth <= 0:
        return
    try:
        with os.scandir(root) as entries:
            subdirs = []
            for entry in entries:
                budget[0] -= 1
                if budget[0] < 0:
                    return
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(Path(entry.path))
    except OSError:
        return
    for sub in sorted(subdirs):
        if (sub / LOCK_FILE).is_file():
            yield sub
        yield from _locks_below(sub, depth - 1, budget)


def inner_writer(directory: Path, held: set[Path]) -> tuple[Path, str] | None:
    """A directory below ``directory`` whose lock another writer holds, and who."""
    for sub in _locks_below(directory, DEPTH, [MAX_ENTRIES]):
        if sub.resolve() in held:
            continue
        fd = _open_existing(sub / LOCK_FILE)
        if fd is None:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return sub, holder(fd)
        finally:
            os.close(fd)
    return None


def refuse_inner_writer(directory: Path, own_fd: int | None, held: set[Path]) -> None:
    """Refuse ``directory`` when a record inside it is being written by another writer.
    ``own_fd``: its lock file when the exclusive lock was refused; then only shared
    holders (inner writers) blocking it are this refusal's (an exclusive holder is the
    caller's to name)."""
    if own_fd is not None:
        try:
            fcntl.flock(own_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # an exclusive holder: another writer of this very directory
        fcntl.flock(own_fd, fcntl.LOCK_UN)
    found = inner_writer(directory, held)
    if found is None:
        if own_fd is not None:
            raise UsageError(f"{directory}: a directory inside it is being written by "
                             "another process; wait for it to end (or stop it)")
        return
    sub, who = found
    raise UsageError(f"{directory}: {sub} inside it is being written by {who}; wait for "
                     "it to end (or stop it), or choose another directory")
