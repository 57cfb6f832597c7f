"""The record documents (``run.json``, ``ab.json``, a bench's ``run.json``,
``baseline.json``) and the JSON documents beside them (``summary.json``, a bench's
``summary.json``, ``probes.json``, an A/B arm's ``bench.json``): typed, made, written
and read in one place.

Every record starts with the same header: what kind it is and in which schema version,
the status, abgate's version, the source tree (the same ``git`` facts a manifest
records, so the two never disagree about ``dirty``), the host and the times. Each kind
then has its own typed body (:data:`BODIES`): the spec and its digest, the engine as
loaded, resumes, and the kind's own sections (typed in :mod:`abgate.records.sections`).
:func:`new_record` makes a record model; :func:`write_record` writes any document (a
record or a JSON document) after validating it again (a writer's bug never reaches the
disk); :func:`read_record` and :func:`read_document` read one into its model (a wrong
type, a missing field, an unexpected kind or a newer schema version is a one-line error
naming the file and the field). Each document name has its own schema version
(:data:`SCHEMA_VERSIONS`); an older file is upgraded on read by the steps in
:data:`MIGRATIONS` (a version-aware before-validator, as inspect_ai's EvalLog
migrates). A bench summary's and a baseline's cases and probes are typed in
:mod:`abgate.records.bench_sections`; sections owned by others (``cleanup``, an
engine's effective config, resources) are JSON objects; unknown fields from newer minor
versions are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from abgate import __version__
from abgate.compare.results import ComparisonDoc, Result
from abgate.errors import AbgateError, UsageError
from abgate.host import host_info
from abgate.integrity import FIELD, verify_file
from abgate.provenance.gitinfo import git_state
from abgate.records.bench_sections import BaselineCase, BenchProbes, BenchSummaryCase, ProbeRecord
from abgate.records.engine import (
    EngineSection,
    LoadedEngine,
    ab_to_v2,
    digested_spec,
    given_config,
    to_v2,
)
from abgate.records.sections import (
    ArmDifferences,
    Distribution,
    EngineRecord,
    GitState,
    HostInfo,
    Number,
    Provenance,
    QualitySummary,
    Resume,
    Section,
    SourceRecord,
    Spec,
)
from abgate.redact import redact
from abgate.runner import records as rec

Kind = Literal["run", "ab-arm", "ab", "bench", "baseline"]
Status = Literal["running", "complete", "failed", "interrupted"]
# Each document's schema version; a reader refuses a newer one than it knows.
SCHEMA_VERSIONS: dict[str, int] = {
    "run": 2, "ab-arm": 2, "ab": 2, "bench": 2, "baseline": 2,
    "summary": 1, "bench-summary": 1, "probes": 1, "ab-bench": 1, "ab-report": 1}
# name -> {version: step}: the step turns a document of that version into the next one.
Migration = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[str, dict[int, Migration]] = {  # records/engine.py; docs/records.md
    **{kind: {1: to_v2} for kind in ("run", "ab-arm", "bench", "baseline")},
    "ab": {1: ab_to_v2}}


def upgraded(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a document called ``name``) brought to the current schema version, one
    step at a time; a version without a step is already the current shape."""
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return doc
    steps = MIGRATIONS.get(name, {})
    while version < SCHEMA_VERSIONS[name]:
        if version in steps:
            doc = {**steps[version](dict(doc)), "schema_version": version + 1}
        version += 1
    return doc


class Document(Section):
    """A JSON document abgate writes: its schema version (of its own name, ``NAME``),
    older versions upgraded on the way in."""

    NAME: ClassVar[str]
    schema_version: int

    @classmethod
    def name_of(cls, doc: dict[str, Any]) -> str:
        return cls.NAME

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if isinstance(data, dict):
            name = cls.name_of(data)
            if name in SCHEMA_VERSIONS:
                return upgraded(name, data)
        return data

    @classmethod
    def new(cls: type[D], **fields: Any) -> D:
        """A document of the current version."""
        return cls(schema_version=SCHEMA_VERSIONS[cls.NAME], **fields)


D = TypeVar("D", bound=Document)


class RecordHeader(Document):
    """The fields every record document has; the rest is the kind's own."""

    kind: Kind
    status: Status | None = None
    abgate_version: str
    git: GitState | None
    host: HostInfo
    started_at: float
    ended_at: float | None = None
    error: str | None = None

    @classmethod
    def name_of(cls, doc: dict[str, Any]) -> str:
        return str(doc.get("kind"))


class LoadFacts(Section):
    """What a load records (``runner.session.loaded``, ``record_after_load``), for a
    load before its record exists (a bench plans on the loaded engine before it writes
    anything); a record takes these fields over."""

    engine: EngineRecord | None = None  # set once the engine is loaded
    engine_processes: list[Any] = []
    provenance: Provenance | None = None
    cleanup: dict[str, Any] | None = None


class SpecRecord(RecordHeader):
    """A record of one prepared spec (a run, a bench, a baseline) and its load. Its
    engine args are in ``engine`` only, as three facets (given, resolved, effective:
    :mod:`abgate.records.engine`), not in ``config`` or ``spec``."""

    config: dict[str, Any]
    spec: Spec
    spec_digest: str
    engine: EngineSection = Field(default_factory=EngineSection)  # loaded facts: at the load
    engine_processes: list[Any] = []
    provenance: Provenance | None = None
    cleanup: dict[str, Any] | None = None


    def given_config(self) -> dict[str, Any]:
        """The config as given (its engine args from ``engine.given``), for a config
        model to read back."""
        return given_config(self.config, self.engine)

    def digested_spec(self) -> dict[str, Any]:
        """The spec as its digest covers it (the engine args put back in the v1 shape)."""
        return digested_spec(self.spec.to_dict(), self.engine)


class RunRecord(SpecRecord):
    """``run.json`` of ``abgate run`` and of each A/B arm (kind ``ab-arm``)."""

    resumes: list[Resume] = []
    inputs: dict[str, str | None] | None = None
    n_samples: int | None = None


class AbSchedule(Section):
    mode: Literal["interleave", "blocks"]
    warmup: int
    block_size: int
    executed: list[str]


class SequentialLook(Section):
    """One look of a sequential A/B: after how many items, each candidate's decision."""

    n_items: int
    decisions: dict[str, str | None]
    at: float


class AbSequential(Section):
    """How a sequential A/B stopped (``[schedule] stopping = "sequential"``)."""

    look_every: int
    max_items: int
    looks: list[SequentialLook] = []
    stopped_at: int | None


class AbExperiment(Section):
    """The experiment as recorded (``Experiment.to_dict()``)."""

    name: str | None = None
    description: str | None = None
    baseline: str
    arms: dict[str, dict[str, Any]]
    schedule: dict[str, Any] | None = None
    policy: str | None = None


class ScoringCost(Section):
    """One arm's scoring pass: its cost, or why it did not run (``reason``)."""

    max_tokens_per_sequence: int | None = None
    seconds: float | None = None
    n_tokens: int | None = None
    method: str | None = None
    n_sequences: int | None = None
    prompts_restored: int | None = None
    reason: str | None = None

    def add(self, seconds: float, n_tokens: int, method: str) -> None:
        """One more sequence scored."""
        self.seconds = (self.seconds or 0.0) + seconds
        self.n_tokens = (self.n_tokens or 0) + n_tokens
        self.method = method
        self.n_sequences = (self.n_sequences or 0) + 1


class AbRecord(RecordHeader):
    """``ab.json``: the experiment, each arm's spec digest, the schedule as run, the
    engines as loaded, and the scoring pass's cost (or why not) per arm."""

    inputs: dict[str, str | None] | None = None
    experiment: AbExperiment
    # Every field as run, defaults included (``Experiment.resolved``); absent in an
    # ab.json written before it existed. ``experiment`` (as given) keeps the digest.
    experiment_resolved: AbExperiment | None = None
    arm_spec_digests: dict[str, str]
    digest: str
    schedule: AbSchedule
    engines: dict[str, LoadedEngine]  # each arm's facets: its run.json's engine section
    resumes: list[Resume]
    # Per candidate: its differences from the baseline, declared and undeclared apart,
    # before the load ("request") and after it ("loaded"); see abgate.ab.declared.
    differences: dict[str, ArmDifferences] = {}
    scoring: dict[str, ScoringCost] = {}
    sequential: AbSequential | None = None
    # abgate.host_load snapshots at the start and end of the interleaved run or each block
    host_load: dict[str, Any] | None = None
    # a fleet A/B (abgate.fleet): the cluster, each replica's facts, losses, cleanup
    fleet: dict[str, Any] | None = None
    # a revision A/B (abgate.ab.revisions): the repository, revisions and each arm's build
    source: SourceRecord | None = None

    def git_for_arms(self) -> GitState | None:
        """The source state every arm of this start records (the latest start's)."""
        return self.resumes[-1].git if self.resumes else self.git


class BenchRecord(SpecRecord):
    """A bench's ``run.json``."""


class BaselineRecord(SpecRecord):
    """``baseline.json``: the reference outputs a later build must reproduce, sealed by
    ``integrity`` (``integrity.py``: checked on every read of a baseline)."""

    recorded_at: float
    integrity: dict[str, Any] | None = None
    upgrades: list[dict[str, Any]] | None = None  # abgate baseline upgrade: what it verified
    cases: list[BaselineCase] = []
    probes: list[ProbeRecord] = []
    host_load: dict[str, Any] | None = None


class Summary(Document):
    """A run's (an A/B arm's) ``summary.json``: quality and speed of its measured
    samples (``runner.summary.summarize``); ``status`` is the run's when the summary was
    written at its end."""

    NAME = "summary"
    n: int
    n_warmup: int = 0
    quality: QualitySummary
    speed: dict[str, Distribution]
    status: str | None = None


class ProbesDocument(Document):
    """An A/B arm's ``probes.json``: each probe's result (none, with why, when the
    engine cannot run them)."""

    NAME = "probes"
    probes: list[dict[str, Any]]
    error: str | None = None


class AbBenchDocument(Document):
    """An A/B arm's ``bench.json``: the fixed-length speed cases it ran."""

    NAME = "ab-bench"
    kind: Literal["ab-bench"] = "ab-bench"
    plan: dict[str, Any]
    cases: list[dict[str, Any]]


class BenchSummary(Document):
    """A bench's ``summary.json``: per-case distributions, probes, resources, bandwidth
    (the host's and the engine's own objects, typed as JSON objects)."""

    NAME = "bench-summary"
    kind: Literal["bench"] = "bench"
    status: Status | None
    cases: list[BenchSummaryCase]
    probes: BenchProbes | None
    n_ctx: int | None = None
    warmup: int | None = None
    repeats: int | None = None
    prompt_seed: int | None = None
    resources: dict[str, Any] | None = None
    model_bytes: dict[str, Any] | None = None
    peak_bandwidth: dict[str, Any] | None = None
    not_certified: list[str] | None = None


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


Loadable = SpecRecord | LoadFacts  # what runner.session.loaded records a load into
AnyRecord = RunRecord | AbRecord | BenchRecord | BaselineRecord
R = TypeVar("R", RunRecord, AbRecord, BenchRecord, BaselineRecord)
BODIES: dict[str, type[AnyRecord]] = {"run": RunRecord, "ab-arm": RunRecord,
                                      "ab": AbRecord, "bench": BenchRecord,
                                      "baseline": BaselineRecord}
_ = Number  # re-exported for documents' users


# Every JSON file abgate writes in an output directory (``runner.outdir.OWNED_FILES``):
# the models it is written through (write_record) and read through, or, for the files
# not typed here, what they are and who writes them.
DOCUMENT_FILES: dict[str, tuple[type[Document] | type[Result], ...]] = {
    "run.json": (RunRecord, BenchRecord), "ab.json": (AbRecord,),
    "baseline.json": (BaselineRecord,), "summary.json": (Summary, BenchSummary),
    "probes.json": (ProbesDocument,), "bench.json": (AbBenchDocument,),
    "comparison.json": (ComparisonDoc,)}  # typed in compare/results.py
LINE_FILES = {  # JSON Lines, appended line by line
    "samples.jsonl": "runner.records.SampleWriter; each line a runner.samples.Sample (a "
                     "bench's: a bench.samples.BenchSample or bench.probes.ProbeLine, read "
                     "by bench.samples.read_bench_lines)",
    "agreement.jsonl": "ab.evidence, one compare.agreement_rows.AgreementRow per scored "
                       "sequence (read by ab.analyze.read_agreement)",
    "decisions.jsonl": "ab.decision: one DecisionRecord per line",
    "attachments.jsonl": "provenance.attach: attachment lines",
    "load_samples.jsonl": "bench.load_run: one raw request of a served load bench per line"}
NOT_RECORDS = {  # JSON that is not one of these record documents
    "manifest.json": "provenance.manifest, with its own schema and version",
    "report.json": "a rendered report (report.jsondoc)",
    "signed-files.json": "signing.sign_directory: every file's SHA-256 (signed beside it)",
    "weights-diff-*.json": "weights.diff, schema abgate.weights_diff",
    "load.json": "bench.load_run: a served load bench (spec, schedule, metrics)"}


def source_state(out: Path | None = None) -> GitState | None:
    """The git facts of the working directory's checkout (None outside one), abgate's
    own output directory ``out`` excluded (its records are not source: an A/B's second
    arm must not find the tree dirty because the first arm's files are untracked)."""
    try:
        state = git_state(Path.cwd(), ignore=[out] if out is not None else [])
    except AbgateError:
        return None
    return None if state is None else GitState.model_validate(state)


def new_record(kind: Kind, *, out: Path | None = None, **fields: Any) -> AnyRecord:
    """A new document of ``kind``: the header, then ``fields``. The header's ``git`` is
    ``fields["git"]`` when given (one state for a whole A/B), else the checkout's state
    with ``out`` excluded."""
    git = fields.pop("git") if "git" in fields else source_state(out)
    model = BODIES[kind]
    if issubclass(model, SpecRecord):
        fields = to_v2(fields)  # the engine args as one section, as a v1 record migrates
    elif model is AbRecord:
        fields = ab_to_v2(fields)  # the arms' facets left to the arms' records
    try:
        return model(schema_version=SCHEMA_VERSIONS[kind], kind=kind, status="running",
                     abgate_version=__version__, git=git,
                     host=HostInfo.model_validate(host_info()),
                     started_at=time.time(), ended_at=None, error=None, **fields)
    except ValidationError as exc:  # a writer's bug
        raise _one_line(Path(f"<new {kind} record>"), exc) from None


def _one_line(path: Path, exc: ValidationError) -> AbgateError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "<root>"
    return AbgateError(f"{path}: {where}: {first['msg']}")


def _check_version(path: Path, name: str, doc: dict[str, Any]) -> None:
    version = doc.get("schema_version")
    known = SCHEMA_VERSIONS[name]
    if isinstance(version, int) and version > known:
        raise AbgateError(f"{path}: {name} schema_version {version} is newer than this "
                          f"abgate understands ({known}); upgrade abgate")


def _validated(path: Path, doc: dict[str, Any], model: type[D] | None = None) -> Document:
    try:
        if model is None:
            header = RecordHeader.model_validate(doc)
            _check_version(path, header.kind, doc)
            return BODIES[header.kind].model_validate(doc)
        _check_version(path, model.NAME, doc)
        return model.model_validate(doc)
    except ValidationError as exc:
        raise _one_line(path, exc) from None


def check_record(path: Path, doc: dict[str, Any]) -> None:
    """Validate the record ``doc`` against its header and its kind's body model."""
    _validated(path, doc)


def write_record(path: Path, doc: Document | Result) -> None:
    """Write ``doc`` (any record or JSON document, or a compare-layer result document
    such as ``comparison.json``) atomically, after validating what is written against
    its model (a writer's bug is an error, never a bad file)."""
    if isinstance(doc, Result):
        data = doc.to_json()
        try:
            type(doc).model_validate(data)
        except ValidationError as exc:
            raise _one_line(path, exc) from None
    else:
        data = doc.to_dict()
        _validated(path, data, None if isinstance(doc, RecordHeader) else type(doc))
    rec.write_json_atomic(path, data)


def _read(path: Path, model: type[D] | None, redacted: bool) -> Document:
    try:
        doc = rec.read_json_object(path)
        if not isinstance(doc.get("schema_version"), int):
            raise AbgateError(f"{path}: no schema_version; not an abgate record")
        if redacted and FIELD in doc:  # a sealed document: its bytes before any redaction
            verify_file(path)
        return _validated(path, redact(doc) if redacted else doc, model)
    except AbgateError as exc:  # a damaged or foreign file is bad input, not a failure
        raise UsageError(str(exc)) from None


@overload
def read_record(path: Path, *kinds: Kind, redacted: bool = False) -> AnyRecord: ...
@overload
def read_record(path: Path, *kinds: Kind, model: type[R], redacted: bool = False) -> R: ...


def read_record(path: Path, *kinds: Kind, model: type[R] | None = None,
                redacted: bool = False) -> AnyRecord:
    """A valid record document (header and the kind's body), of one of ``kinds`` when
    given; ``model`` says which model the caller expects (a record of another kind is a
    UsageError); ``redacted``: secrets are redacted on the way in (for reports of
    records written before redaction covered them)."""
    doc = _read(path, None, redacted)
    assert isinstance(doc, RunRecord | AbRecord | BenchRecord | BaselineRecord)
    if kinds and doc.kind not in kinds:
        raise UsageError(f"{path}: a {doc.kind!r} record, where {' or '.join(kinds)} "
                         "was expected")
    if model is not None and not isinstance(doc, model):
        raise UsageError(f"{path}: a {doc.kind!r} record, where a {model.__name__} was "
                         "expected")
    return doc


def read_document(path: Path, model: type[D], *, redacted: bool = False) -> D:
    """A JSON document (``summary.json``, ``probes.json``, ...) read into ``model``."""
    doc = _read(path, model, redacted)
    assert isinstance(doc, model)
    return doc
