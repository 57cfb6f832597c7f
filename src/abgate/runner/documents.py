"""The record documents (``run.json``, ``ab.json``, a bench's ``run.json``,
``baseline.json``): one header, made and checked in one place.

Every document starts with the same header: what kind it is and in which schema
version, the status, abgate's version, the source tree (the same ``git`` facts a
manifest records, so the two never disagree about ``dirty``), the host and the times.
:func:`new_record` makes it; :func:`read_record` reads a document and validates its
header (a wrong type or an unknown kind is a one-line error naming the file and the
field).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from abgate import __version__
from abgate.errors import AbgateError
from abgate.host import host_info
from abgate.provenance.gitinfo import git_state
from abgate.runner import records as rec

Kind = Literal["run", "ab-arm", "ab", "bench", "baseline"]
Status = Literal["running", "complete", "failed", "interrupted"]
# Each kind's schema version; a reader refuses a newer one than it knows.
SCHEMA_VERSIONS: dict[str, int] = {"run": 1, "ab-arm": 1, "ab": 1, "bench": 1, "baseline": 1}


class RecordHeader(BaseModel):
    """The fields every record document has; the rest is the kind's own."""

    model_config = ConfigDict(extra="allow")

    schema_version: int
    kind: Kind
    status: Status | None = None
    abgate_version: str
    git: dict[str, Any] | None
    host: dict[str, Any]
    started_at: float
    ended_at: float | None = None
    error: str | None = None


def source_state() -> dict[str, Any] | None:
    """The git facts of the working directory's checkout (None outside one)."""
    try:
        return git_state(Path.cwd())
    except AbgateError:
        return None


def new_record(kind: Kind, **fields: Any) -> dict[str, Any]:
    """A new document of ``kind``: the header, then ``fields``."""
    header = RecordHeader(schema_version=SCHEMA_VERSIONS[kind], kind=kind, status="running",
                          abgate_version=__version__, git=source_state(), host=host_info(),
                          started_at=time.time())
    return {**header.model_dump(), **fields}


def read_record(path: Path) -> dict[str, Any]:
    """A record document with a valid header (schema version, kind, types)."""
    doc = rec.read_json(path)
    try:
        header = RecordHeader.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise AbgateError(f"{path}: {where}: {first['msg']}") from None
    known = SCHEMA_VERSIONS[header.kind]
    if header.schema_version > known:
        raise AbgateError(f"{path}: {header.kind} schema_version {header.schema_version} is "
                          f"newer than this abgate understands ({known}); upgrade abgate")
    return doc
