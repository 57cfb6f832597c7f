"""File digests kept across processes: ``<cache>/digests.sqlite3`` (the cache is
``$ABGATE_CACHE``, else ``$XDG_CACHE_HOME/abgate``, else ``~/.cache/abgate``).

Every abgate process hashes the model and every shared library its engine maps; a Ray
replica, a launched server's supervisor and each A/B arm did it again, a 16 GB checkpoint
in about 30 s each time. A digest is kept under the file's real path together with its
whole stat signature (size, mtime, ctime, inode, device: :class:`abgate.identity.StatSig`)
and is used only while all five are unchanged. Any write to the file sets its ctime to
now, which no user can set back, and a file renamed over it has another inode, so a
changed file is always read again; what the store can't vouch for is a file changed by
someone who can also write the store. ``ABGATE_DIGEST_CACHE=off`` turns it off (every
process reads every file again, as before).

A store that can't be opened, read or written, or is a symbolic link, is dropped for the
process: the files are then hashed as if there were none. It is a cache, never a record:
nothing is fsynced.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from abgate.identity import StatSig

SCHEMA = ("CREATE TABLE IF NOT EXISTS digests (path TEXT PRIMARY KEY, size INTEGER, "
          "mtime_ns INTEGER, ctime_ns INTEGER, ino INTEGER, dev INTEGER, sha256 TEXT)")


def cache_dir() -> Path:
    """abgate's cache: ``$ABGATE_CACHE``, else ``$XDG_CACHE_HOME/abgate``."""
    if os.environ.get("ABGATE_CACHE"):
        return Path(os.environ["ABGATE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "abgate"


class DigestStore:
    """SHA-256 digests by real path and stat signature, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._pid = 0  # a connection is never used across a fork
        self._broken = False

    @classmethod
    def default(cls) -> DigestStore | None:
        if os.environ.get("ABGATE_DIGEST_CACHE", "").lower() in ("off", "0", "false", "no"):
            return None
        return cls(cache_dir() / "digests.sqlite3")

    def get(self, real: str, sig: StatSig) -> str | None:
        row = self._run("SELECT sha256 FROM digests WHERE path = ? AND size = ? AND "
                        "mtime_ns = ? AND ctime_ns = ? AND ino = ? AND dev = ?",
                        (real, *sig))
        return row[0] if row else None

    def put(self, real: str, sig: StatSig, digest: str) -> None:
        self._run("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?, ?)",
                  (real, *sig, digest))

    def _run(self, sql: str, args: tuple[object, ...]) -> tuple[str] | None:
        db = self._connect()
        if db is None:
            return None
        try:
            with db:
                row: tuple[str] | None = db.execute(sql, args).fetchone()
                return row
        except sqlite3.Error:
            self._drop()
            return None

    def _connect(self) -> sqlite3.Connection | None:
        if self._broken:
            return None
        if self._db is not None and self._pid == os.getpid():
            return self._db
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_symlink():  # nothing is written through a link (issue 35)
                raise OSError(f"{self.path} is a symbolic link")
            db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")
            db.execute(SCHEMA)
        except (sqlite3.Error, OSError):
            self._drop()
            return None
        self._db, self._pid = db, os.getpid()
        return db

    def _drop(self) -> None:
        self._broken, self._db = True, None
