"""The writer lock covers the records nested in a locked directory.

An A/B writes its arms' records in ``AB/arms/<arm>``; a writer of any directory under
a locked record (``abgate run -o AB/arms/b --force``, a bench, a resume) would delete
or append to records the A/B is writing. So a writer, before it creates or locks its
own directory, takes a *shared* ``flock`` on the ``.abgate.lock`` of every ancestor
that has one (a regular file, never through a link; no lock file is ever created in
an ancestor) and holds them for its whole write:

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
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from abgate.errors import UsageError
from abgate.records.side_documents import LockHolder
from abgate.safejson import parse

LOCK_FILE = ".abgate.lock"
DEPTH = 4  # directory levels looked into below a locked directory
MAX_ENTRIES = 20000  # entries looked at below it (a huge tree is not scanned whole)


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
