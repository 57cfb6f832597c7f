"""The record documents (``run.json``, ``ab.json``, a bench's ``run.json``,
``baseline.json``) and the JSON documents beside them (``summary.json``, a bench's
``summary.json``, ``probes.json``, an A/B arm's ``bench.json``, a ``decisions.jsonl``
line), typed: one model per document, shared by the writers and every reader.

Every record starts with the same header (:class:`RecordHeader`): what kind it is and in
which schema version, the status, abgate's version, the source tree, the host and the
times. Each kind then has its own typed body (:data:`BODIES`). Each document name has
its own schema version (:data:`SCHEMA_VERSIONS`); an older file is upgraded on read by
the steps in :data:`MIGRATIONS` (a version-aware before-validator, as inspect_ai's
EvalLog migrates). Made, written and read by :mod:`abgate.runner.documents`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field, model_validator

from abgate.integrity import FIELD as SEAL_FIELD
from abgate.integrity import seal as sealed
from abgate.records.bench_sections import BaselineCase, ProbeRecord
from abgate.records.engine import EngineSection, LoadedEngine, digested_spec, given_config
from abgate.records.fleet import FleetRecord
from abgate.records.load_snapshots import AbHostLoad, BaselineHostLoad
from abgate.records.migrations import Stamp, ab_to_v2, to_v2
from abgate.records.sections import (
    ArmDifferences,
    EngineRecord,
    GitState,
    HostInfo,
    Number,
    Provenance,
    Resume,
    Section,
    SourceRecord,
    Spec,
)

LOAD_FORMAT = "load_format"  # an engine arg; "dummy": random weights (vLLM, transformers)
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k")
Kind = Literal["run", "ab-arm", "ab", "bench", "baseline"]
Status = Literal["running", "complete", "failed", "interrupted"]
# Each document's schema version; a reader refuses a newer one than it knows.
SCHEMA_VERSIONS: dict[str, int] = {
    "run": 2, "ab-arm": 2, "ab": 2, "bench": 2, "baseline": 2,
    "summary": 1, "bench-summary": 1, "probes": 1, "ab-bench": 1, "ab-report": 1,
    "cluster-bench": 1, "cluster-check": 1}


def current_version(name: str) -> int:
    """The schema version this abgate writes the document ``name`` in (a lookup in
    :data:`SCHEMA_VERSIONS`, not a read of any document)."""
    return SCHEMA_VERSIONS[name]


# name -> {version: step}: the step turns a document of that version into the next one.
Migration = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[str, dict[int, Migration]] = {  # records/migrations.py; docs/records.md
    **{kind: {1: to_v2} for kind in ("run", "ab-arm", "bench", "baseline")},
    "ab": {1: ab_to_v2}}


def upgraded(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a document called ``name``) brought to the current schema version, one
    step at a time; a version without a step is already the current shape."""
    version = Stamp.of(doc).version
    if version is None:
        return doc
    steps = MIGRATIONS.get(name, {})
    while version < current_version(name):
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
    def current_version(cls) -> int:
        """The schema version this abgate writes documents of this name in."""
        return current_version(cls.NAME)

    @classmethod
    def new(cls: type[D], **fields: Any) -> D:
        """A document of the current version."""
        return cls(schema_version=cls.current_version(), **fields)


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
        return str(Stamp.of(doc).kind)


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


class ExperimentArm(Section):
    """One arm of a recorded experiment (``RunConfig.to_dict``), its fields in the order
    it writes them (``runner.spec.RunConfig`` checks them strictly when a record is read
    back into a config); a field an older record lacks is None."""

    engine: str | None = None
    model: str | None = None
    engine_args: dict[str, Any] | None = None
    engine_options: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    suite: str | None = None
    data: str | None = None
    difficulty: str | None = None
    synthetic_seed: int | None = None
    limit: int | None = None
    sample: int | None = None
    sample_seed: int | None = None
    seeds: list[int] | None = None
    max_tokens: int | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    top_k: int | None = None
    shots: int | None = None
    shots_file: str | None = None
    system: str | None = None

    def sampling(self) -> dict[str, Any]:
        """The sampling fields recorded (``max_tokens``, ``temperature``, ``top_p``,
        ``top_k``), in that order."""
        return {k: getattr(self, k) for k in SAMPLING_FIELDS if k in self.model_fields_set}


class ExperimentSchedule(Section):
    """The experiment's ``schedule`` as given (``Schedule.to_dict``: the sequential keys
    only when sequential) or as resolved (every key)."""

    mode: str | None = None
    warmup: int | None = None
    block_size: int | None = None
    stopping: str | None = None  # "sequential", else a fixed-N A/B
    max_items: int | None = None
    look_every: int | None = None


class ExperimentEvidence(Section):
    agreement: bool | None = None  # teacher-forced scoring ran (absent: the default, on)


class AbExperiment(Section):
    """The experiment as recorded (``Experiment.to_dict``, or ``Experiment.resolved``
    with every field): its fields in the order they are written."""

    name: str | None = None
    description: str | None = None
    baseline: str
    arms: dict[str, ExperimentArm]  # in file order
    schedule: ExperimentSchedule | None = None
    policy: str | None = None
    policy_name: str | None = None  # resolved only
    bench: dict[str, Any] | None = None
    expect: str | None = None  # absent: "lossy"
    evidence: ExperimentEvidence | None = None

    @property
    def expects(self) -> str:
        return self.expect or "lossy"

    @property
    def stopping(self) -> str:
        return (self.schedule.stopping if self.schedule else None) or "fixed"

    @property
    def look_every(self) -> int:
        return (self.schedule.look_every if self.schedule else None) or 1

    @property
    def scores_agreement(self) -> bool:
        return self.evidence is None or self.evidence.agreement is not False


class ScoringCost(Section):
    """One arm's scoring pass: its cost, or why it did not run (``reason``)."""

    max_tokens_per_sequence: int | None = None
    seconds: float | None = None
    n_tokens: int | None = None
    method: str | None = None
    n_sequences: int | None = None
    prompts_restored: int | None = None
    reason: str | None = None
    error: str | None = None  # why it failed (an ab.json of an older abgate)

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
    host_load: AbHostLoad | None = None
    # a fleet A/B (abgate.fleet): the cluster, each replica's facts, losses, cleanup
    fleet: FleetRecord | None = None
    # a revision A/B (abgate.ab.revisions): the repository, revisions and each arm's build
    source: SourceRecord | None = None

    def scoring_of(self, arm: str) -> ScoringCost:
        """The arm's scoring pass as recorded (an empty one when it has none)."""
        return self.scoring.get(arm) or ScoringCost()

    def load_formats(self, arm: str, effective: Mapping[str, Any] | None = None
                     ) -> tuple[tuple[str, Any], ...]:
        """(where, value) of ``load_format`` in the arm's effective config (``effective``:
        its run.json's effective facet), then its engine args (``"dummy"``: random
        weights)."""
        config = self.experiment.arms.get(arm)
        found = (("effective config", effective or {}),
                 ("engine args", (config.engine_args if config else None) or {}))
        return tuple((where, args.get(LOAD_FORMAT)) for where, args in found)

    def git_for_arms(self) -> GitState | None:
        """The source state every arm of this start records (the latest start's)."""
        return self.resumes[-1].git if self.resumes else self.git


class BenchRecord(SpecRecord):
    """A bench's ``run.json``."""


class BaselineRecord(SpecRecord):
    """``baseline.json``: the reference outputs a later build must reproduce, sealed by
    ``integrity`` (``integrity.py``: checked on every read of a baseline)."""

    NAME = "baseline"  # its kind (a record's migrations are chosen by its kind)

    recorded_at: float
    integrity: dict[str, Any] | None = None
    upgrades: list[dict[str, Any]] | None = None  # abgate baseline upgrade: what it verified
    cases: list[BaselineCase] = []
    probes: list[ProbeRecord] = []
    host_load: BaselineHostLoad | None = None

    def seal(self) -> None:
        """Set ``integrity``: the seal over this record as it will be written
        (``integrity.seal``)."""
        self.integrity = sealed(self.to_dict())[SEAL_FIELD]


Loadable = SpecRecord | LoadFacts  # what runner.session.loaded records a load into
AnyRecord = RunRecord | AbRecord | BenchRecord | BaselineRecord
R = TypeVar("R", RunRecord, AbRecord, BenchRecord, BaselineRecord)
BODIES: dict[str, type[AnyRecord]] = {"run": RunRecord, "ab-arm": RunRecord,
                                      "ab": AbRecord, "bench": BenchRecord,
                                      "baseline": BaselineRecord}
