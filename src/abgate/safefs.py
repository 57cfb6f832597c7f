"""abgate writes its own files only, never through a symbolic link.

Every file abgate writes, appends to, truncates or replaces in its directories (the
writer lock, ``samples.jsonl``, ``run.log`` and server logs, ``agreement.jsonl``,
``decisions.jsonl``, ``attachments.jsonl``, the reports, the JSON records written
atomically, the ledger) is opened here: with ``O_NOFOLLOW`` (a link in the last place
fails to open instead of being followed), after an ``lstat`` that names the link, and
checked to be a regular file once open (a FIFO or a device is refused too). A refusal
is one line, a :class:`UsageError` (exit 2) naming the link and where it points; the
file it points to is never opened for writing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from pathlib import Path
from typing import IO, Any

from abgate.errors import AbgateError, UsageError

_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO never hangs us


def link_refusal(path: Path) -> UsageError:
    """The one-line refusal of a write through the link ``path``."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return UsageError(f"{path} is a symbolic link{target}; abgate never writes or deletes "
                      "through a link: remove it, or choose another directory")


def is_link(path: Path) -> bool:
    """Whether ``path`` itself is a symbolic link (``lstat``; a missing path is not)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def refuse_link(path: Path) -> None:
    """A :class:`UsageError` naming ``path`` when it is a symbolic link."""
    if is_link(path):
        raise link_refusal(path)


def open_fd(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` never following a link in the last place, and only for
    a regular file: a link or anything else is a one-line UsageError naming ``path``.
    Other failures (a missing directory, a full disk) are the OSError as raised."""
    refuse_link(path)
    try:
        fd = os.open(path, flags | _OPEN, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or is_link(path):  # made a link since the lstat
            raise link_refusal(path) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader
            raise UsageError(f"{path} is not a regular file; abgate writes only its own "
                             "files") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path} is not a regular file; abgate writes only its own "
                             "files: remove it, or choose another directory")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: Path) -> int:
    """A descriptor appending to ``path`` (created if missing), never through a link."""
    return open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def open_text_append(path: Path) -> IO[str]:
    """:func:`open_append` as a UTF-8 text stream."""
    return os.fdopen(open_append(path), "a", encoding="utf-8")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` whole or not at all (a temporary file, fsync, rename):
    a link at ``path`` or at its temporary name is refused (replacing a link would
    delete it), a failure leaves the previous version, no temporary file, and is a
    one-line AbgateError naming ``path``."""
    refuse_link(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        if not is_link(tmp):
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise AbgateError(f"{path}: cannot write ({exc.strerror or exc})") from exc


def truncate(path: Path, size: int) -> None:
    """Cut ``path`` to ``size`` bytes and fsync it, never through a link."""
    fd = open_fd(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


class LogFile(logging.FileHandler):
    """A logging file handler that appends to its file never through a link."""

    def __init__(self, path: Path) -> None:
        refuse_link(path)
        super().__init__(path, mode="a", encoding="utf-8", delay=False)

    def _open(self) -> Any:
        return open_text_append(Path(self.baseFilename))
