"""The record documents (``run.json``, ``ab.json``, a bench's ``run.json``,
``baseline.json``): typed, made, written and read in one place.

Every document starts with the same header: what kind it is and in which schema
version, the status, abgate's version, the source tree (the same ``git`` facts a
manifest records, so the two never disagree about ``dirty``), the host and the times.
Each kind then has its own typed body (:data:`BODIES`): the spec and its digest, the
engine as loaded, resumes, and the kind's own sections. :func:`new_record` makes a
document; :func:`write_record` checks it against its kind's model before the atomic
write (a writer's bug never reaches the disk); :func:`read_record` reads one and
validates it (a wrong type, a missing field or an unexpected kind is a one-line error
naming the file and the field). Sections that grow with abgate (``provenance``,
``cleanup``, per-case bench results) are typed as JSON objects; unknown top-level
fields from newer minor versions are kept.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from abgate import __version__
from abgate.errors import AbgateError, UsageError
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


class Resume(BaseModel):
    at: float
    from_status: str | None = None


class EngineRecord(BaseModel):
    """``Engine.describe()`` as recorded."""

    model_config = ConfigDict(extra="allow")

    name: str
    version: str | None = None
    model: str | None = None
    effective_config: dict[str, Any]
    capabilities: dict[str, Any]


class _Spec(RecordHeader):
    config: dict[str, Any]
    spec: dict[str, Any]
    spec_digest: str
    engine: EngineRecord | None = None  # set once the engine is loaded
    engine_processes: list[Any] = []
    provenance: dict[str, Any] | None = None
    cleanup: dict[str, Any] | None = None


class RunRecord(_Spec):
    """``run.json`` of ``abgate run`` and of each A/B arm (kind ``ab-arm``)."""

    resumes: list[Resume] = []
    n_samples: int | None = None


class AbSchedule(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: Literal["interleave", "blocks"]
    warmup: int
    block_size: int
    executed: list[str]


class SequentialLook(BaseModel):
    """One look of a sequential A/B: after how many items, each candidate's decision."""

    n_items: int
    decisions: dict[str, str]
    at: float


class AbSequential(BaseModel):
    """How a sequential A/B stopped (``[schedule] stopping = "sequential"``)."""

    look_every: int
    max_items: int
    looks: list[SequentialLook] = []
    stopped_at: int | None = None


class AbRecord(RecordHeader):
    """``ab.json``: the experiment, each arm's spec digest, the schedule as run, the
    engines as loaded, and the scoring pass's cost (or why not) per arm."""

    experiment: dict[str, Any]
    arm_spec_digests: dict[str, str]
    digest: str
    schedule: AbSchedule
    engines: dict[str, EngineRecord]
    resumes: list[Resume]
    scoring: dict[str, dict[str, Any]] = {}
    # Per candidate: its differences from the baseline, declared and undeclared apart,
    # before the load ("request") and after it ("loaded"); see abgate.ab.declared.
    differences: dict[str, dict[str, Any]] = {}
    sequential: AbSequential | None = None


class BenchRecord(_Spec):
    """A bench's ``run.json``."""


class BaselineRecord(_Spec):
    """``baseline.json``: the reference outputs a later build must reproduce, sealed by
    ``integrity`` (``integrity.py``: checked on every read of a baseline)."""

    recorded_at: float
    integrity: dict[str, Any] | None = None
    cases: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []


class DecisionSource(BaseModel):
    """The source tree every arm of the decided A/B ran on."""

    commit: str
    tree: str | None
    dirty: bool | None


class DecisionRecord(BaseModel):
    """One line of an A/B's ``decisions.jsonl`` (``abgate decide``): the engineer's
    decision, why, when, and the machine verdict it confirms, overrides or settles."""

    model_config = ConfigDict(extra="forbid")

    schema_name: Literal["abgate.decision"] = "abgate.decision"
    schema_version: int = 1
    decision: Literal["keep-default-on", "make-opt-in", "revert"]
    why: str
    by: str | None = None
    arm: str | None = None  # None: the decision covers the A/B's overall verdict
    machine_verdict: str | None
    arm_verdicts: dict[str, str | None]
    relation: Literal["confirms", "overrides", "settles"]
    source: DecisionSource
    decided_at: str


BODIES: dict[str, type[RecordHeader]] = {"run": RunRecord, "ab-arm": RunRecord,
                                         "ab": AbRecord, "bench": BenchRecord,
                                         "baseline": BaselineRecord}


def source_state(out: Path | None = None) -> dict[str, Any] | None:
    """The git facts of the working directory's checkout (None outside one), abgate's
    own output directory ``out`` excluded (its records are not source: an A/B's second
    arm must not find the tree dirty because the first arm's files are untracked)."""
    try:
        return git_state(Path.cwd(), ignore=[out] if out is not None else [])
    except AbgateError:
        return None


def new_record(kind: Kind, *, out: Path | None = None, **fields: Any) -> dict[str, Any]:
    """A new document of ``kind``: the header, then ``fields``. The header's ``git`` is
    ``fields["git"]`` when given (one state for a whole A/B), else the checkout's state
    with ``out`` excluded."""
    git = fields.pop("git") if "git" in fields else source_state(out)
    header = RecordHeader(schema_version=SCHEMA_VERSIONS[kind], kind=kind, status="running",
                          abgate_version=__version__, git=git, host=host_info(),
                          started_at=time.time())
    return {**header.model_dump(), **fields}


def _one_line(path: Path, exc: ValidationError) -> AbgateError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "<root>"
    return AbgateError(f"{path}: {where}: {first['msg']}")


def check_record(path: Path, doc: dict[str, Any]) -> None:
    """Validate ``doc`` against its header and its kind's body model."""
    try:
        header = RecordHeader.model_validate(doc)
        BODIES[header.kind].model_validate(doc)
    except ValidationError as exc:
        raise _one_line(path, exc) from None
    known = SCHEMA_VERSIONS[header.kind]
    if header.schema_version > known:
        raise AbgateError(f"{path}: {header.kind} schema_version {header.schema_version} is "
                          f"newer than this abgate understands ({known}); upgrade abgate")


def write_record(path: Path, doc: dict[str, Any]) -> None:
    """Check ``doc`` (a writer's bug is an error, never a bad file), then write it
    atomically."""
    check_record(path, doc)
    rec.write_json_atomic(path, doc)


def read_record(path: Path, *kinds: Kind) -> dict[str, Any]:
    """A valid record document (header and the kind's body), of one of ``kinds``
    when given."""
    doc = rec.read_json(path)
    try:
        check_record(path, doc)
    except AbgateError as exc:  # a damaged or foreign file is bad input, not a failure
        raise UsageError(str(exc)) from None
    if kinds and doc["kind"] not in kinds:
        raise UsageError(f"{path}: a {doc['kind']!r} record, where {' or '.join(kinds)} "
                          "was expected")
    return doc
