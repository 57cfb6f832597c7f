"""The ledger's SQLite file: two tables, ``records`` (one row per directory or imported
file, keyed by a content id) and ``units`` (one row per measured configuration in it).

The file is created on first use; every write is one transaction. Nothing here reads
records from disk: :mod:`abgate.ledger.index` builds the :class:`Entry` rows.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from abgate import safefs
from abgate.errors import AbgateError
from abgate.ledger.entries import Entry, LedgerRecord, Unit
from abgate.safejson import BadJson, parse

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, path TEXT NOT NULL, status TEXT,
    started_at REAL, ended_at REAL, git_commit TEXT, git_tree TEXT, git_dirty INTEGER,
    git_diff_sha256 TEXT, host TEXT, abgate_version TEXT, decision TEXT,
    verdicts TEXT NOT NULL DEFAULT '{}', added_at REAL NOT NULL, updated_at REAL NOT NULL,
    moved_from TEXT, missing_since REAL);
CREATE INDEX IF NOT EXISTS records_path ON records(path);
CREATE TABLE IF NOT EXISTS units (
    record_id TEXT NOT NULL REFERENCES records(id) ON DELETE CASCADE,
    name TEXT NOT NULL, engine TEXT, engine_version TEXT, model TEXT, model_sha256 TEXT,
    config_digest TEXT, workload_digest TEXT, suite TEXT, n INTEGER NOT NULL,
    metrics TEXT NOT NULL, PRIMARY KEY (record_id, name));
"""
RECORD_FIELDS = ("id", "kind", "path", "status", "started_at", "ended_at", "git_commit",
                 "git_tree", "git_dirty", "git_diff_sha256", "host", "abgate_version",
                 "decision")
UNIT_FIELDS = ("name", "engine", "engine_version", "model", "model_sha256", "config_digest",
               "workload_digest", "suite", "n")


class Ledger:
    """An open ledger file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        for name in (path.name, *(path.name + x for x in ("-journal", "-wal", "-shm"))):
            safefs.refuse_link(path.with_name(name))  # sqlite would write through it
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(path), timeout=30.0)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA foreign_keys = ON")
            with self.db:
                self.db.executescript(SCHEMA)
                row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'"
                                      ).fetchone()
                if row is None:
                    self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                                    (str(SCHEMA_VERSION),))
                elif int(row[0]) > SCHEMA_VERSION:
                    raise AbgateError(f"ledger {path}: schema_version {row[0]} is newer than "
                                      f"this abgate understands ({SCHEMA_VERSION})")
        except (OSError, sqlite3.Error) as exc:
            raise AbgateError(f"ledger {path}: cannot open ({exc})") from None

    def close(self) -> None:
        self.db.close()

    def get(self, record_id: str) -> LedgerRecord | None:
        row = self.db.execute("SELECT * FROM records WHERE id = ?", (record_id,)).fetchone()
        return None if row is None else _record(row)

    def find(self, ref: str) -> LedgerRecord:
        """A record by id or unique id prefix (at least 6 characters)."""
        rows = self.db.execute("SELECT * FROM records WHERE substr(id, 1, length(?)) = ?",
                               (ref, ref)).fetchall() if len(ref) >= 6 else []
        if len(rows) != 1:
            what = "no" if not rows else f"{len(rows)}"
            raise AbgateError(f"ledger {self.path}: {what} record(s) with id {ref!r}")
        return _record(rows[0])

    def by_path(self, path: str) -> list[LedgerRecord]:
        rows = self.db.execute("SELECT * FROM records WHERE path = ?", (path,)).fetchall()
        return [_record(r) for r in rows]

    def put(self, entry: Entry, moved_from: str | None = None) -> None:
        """Insert or replace ``entry`` and its units (one transaction)."""
        now = time.time()
        old = self.get(entry.id)
        row = entry.model_dump()
        values = [row[f] for f in RECORD_FIELDS]
        values[RECORD_FIELDS.index("git_dirty")] = (None if entry.git_dirty is None
                                                    else int(entry.git_dirty))
        with self.db:
            self.db.execute("DELETE FROM units WHERE record_id = ?", (entry.id,))
            self.db.execute(
                f"INSERT OR REPLACE INTO records ({', '.join(RECORD_FIELDS)}, verdicts, "
                "added_at, updated_at, moved_from, missing_since) VALUES "
                f"({', '.join('?' * len(RECORD_FIELDS))}, ?, ?, ?, ?, NULL)",
                (*values, json.dumps(entry.verdicts.to_dict(), sort_keys=True),
                 old.added_at if old else now, now,
                 moved_from if moved_from else (old.moved_from if old else None)))
            for unit in entry.units:
                self.db.execute(
                    f"INSERT INTO units (record_id, {', '.join(UNIT_FIELDS)}, metrics) "
                    f"VALUES (?, {', '.join('?' * len(UNIT_FIELDS))}, ?)",
                    (entry.id, *(getattr(unit, f) for f in UNIT_FIELDS),
                     json.dumps(unit.metrics, sort_keys=True)))

    def mark_missing(self, record_id: str, missing: bool) -> None:
        with self.db:
            if missing:
                self.db.execute("UPDATE records SET missing_since = COALESCE(missing_since, ?)"
                                " WHERE id = ?", (time.time(), record_id))
            else:
                self.db.execute("UPDATE records SET missing_since = NULL WHERE id = ?",
                                (record_id,))

    def forget(self, record_id: str) -> None:
        with self.db:
            self.db.execute("DELETE FROM records WHERE id = ?", (record_id,))

    def records(self, kind: str | None = None) -> list[LedgerRecord]:
        sql, args = "SELECT * FROM records", []
        if kind:
            sql, args = sql + " WHERE kind = ?", [kind]
        rows = self.db.execute(sql + " ORDER BY started_at, id", args).fetchall()
        return [_record(r) for r in rows]

    def units(self, **filters: str | None) -> list[dict[str, Any]]:
        """Units joined with their record, filtered by exact unit fields (``model``: the
        path, a part of it, or a SHA-256 prefix; digests: a prefix), oldest first."""
        where, args = [], []
        for key, value in filters.items():
            if value is None:
                continue
            if key == "model":
                where.append("(instr(u.model, ?) > 0 OR substr(u.model_sha256, 1, length(?))"
                             " = ?)")
                args += [value, value, value]
            elif key in ("config_digest", "workload_digest"):
                prefix = value if value.startswith("sha256:") else "sha256:" + value
                where.append(f"substr(u.{key}, 1, length(?)) = ?")
                args += [prefix, prefix]
            elif key in UNIT_FIELDS:
                where.append(f"u.{key} = ?")
                args.append(value)
            elif key in ("kind", "status", "host"):
                where.append(f"r.{key} = ?")
                args.append(value)
            else:
                raise ValueError(key)
        sql = ("SELECT u.*, r.kind, r.path, r.status, r.started_at, r.ended_at, r.git_commit, "
               "r.git_dirty, r.host, r.missing_since FROM units u JOIN records r "
               "ON r.id = u.record_id")
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self.db.execute(sql + " ORDER BY r.started_at, r.id, u.name", args).fetchall()
        out = []
        for row in rows:
            d = dict(row)
            d["metrics"] = _cell(d["metrics"])
            out.append(d)
        return out

    def units_of(self, record_id: str) -> list[Unit]:
        rows = self.db.execute("SELECT * FROM units WHERE record_id = ? ORDER BY name",
                               (record_id,)).fetchall()
        return [Unit(**{**{f: r[f] for f in UNIT_FIELDS}, "metrics": _cell(r["metrics"])})
                for r in rows]


def _cell(value: Any) -> Any:
    """A JSON cell abgate wrote, read through the guarded parser."""
    if not isinstance(value, str):
        raise BadJson(f"a {type(value).__name__} cell where a JSON text was written")
    return parse(value)


def _record(row: sqlite3.Row) -> LedgerRecord:
    d = dict(row)
    d["verdicts"] = _cell(d["verdicts"] or "{}")
    return LedgerRecord.model_validate(d)


@contextmanager
def opened(path: Path) -> Iterator[Ledger]:
    """The open ledger for the block. A damaged file (a corrupt page, a cell that is not
    the JSON abgate wrote) is one line naming the file, never a traceback."""
    ledger = Ledger(path)
    try:
        yield ledger
    except sqlite3.Error as exc:
        raise AbgateError(f"ledger {path}: damaged ({exc}); move it away (abgate builds a "
                          "new one; `abgate add` re-indexes your records)") from None
    except BadJson as exc:
        raise AbgateError(f"ledger {path}: a stored value is not valid JSON ({exc}); move "
                          "it away (abgate builds a new one)") from None
    finally:
        ledger.close()
