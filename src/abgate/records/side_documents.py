"""The JSON documents beside the records, typed: a run's (an A/B arm's)
``summary.json``, an arm's ``probes.json`` and ``bench.json``, a bench's
``summary.json``, a ``decisions.jsonl`` line, an ``attachments.jsonl`` line and a
writer lock's holder. Each has its own schema version
(:data:`abgate.records.documents.SCHEMA_VERSIONS`), written and read by
:mod:`abgate.runner.documents` (the two lines: ``ab.decision``, ``provenance.attach``;
the lock: ``dirlock``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from abgate.records.bench_sections import (
    BenchProbes,
    BenchSummaryCase,
    CaseFigures,
    EngineResources,
    ModelBytes,
    PeakBandwidth,
    ProbeRecord,
)
from abgate.records.documents import Document, Status
from abgate.records.sections import Distribution, QualitySummary


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
    probes: list[ProbeRecord]
    error: str | None = None


class AbBenchCase(CaseFigures):
    """One case of an arm's ``bench.json``: its figures, then every request's line (a
    ``bench.samples.BenchSample`` as written; as read, its JSON object)."""

    samples: list[Any] | None = None


class AbBenchDocument(Document):
    """An A/B arm's ``bench.json``: the fixed-length speed cases it ran."""

    NAME = "ab-bench"
    kind: Literal["ab-bench"] = "ab-bench"
    plan: dict[str, Any]
    cases: list[AbBenchCase]


class BenchSummary(Document):
    """A bench's ``summary.json``: per-case distributions, probes, resources, bandwidth
    (the engine's process and memory, the peak the roofline is taken against)."""

    NAME = "bench-summary"
    kind: Literal["bench"] = "bench"
    status: Status | None
    cases: list[BenchSummaryCase]
    probes: BenchProbes | None
    n_ctx: int | None = None
    warmup: int | None = None
    repeats: int | None = None
    prompt_seed: int | None = None
    resources: EngineResources | None = None
    model_bytes: ModelBytes | None = None
    peak_bandwidth: PeakBandwidth | None = None
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


class AttachmentRecord(BaseModel):
    """One line of a result directory's ``attachments.jsonl`` (``abgate attach``): the
    commit the results were measured on, the commit they are attached to (same tree),
    where the tested commit was read and when. Written with its keys sorted; a line
    another abgate added keys to still reads (they are kept)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_name: Literal["abgate.attachment"] = Field(default="abgate.attachment", alias="schema")
    schema_version: int = 1
    tested_commit: str
    attached_commit: str
    attached_rev: str | None = None
    tree: str | None = None
    tested_commit_from: str | None = None
    attached_at: str | None = None

    def line(self) -> dict[str, Any]:
        """The JSON object written (``schema``, not the field's name)."""
        out: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return out


class LockHolder(BaseModel):
    """A directory's writer lock file (``.abgate.lock``, ``abgate.dirlock``): who holds
    it, written by the holder and read by a writer it refuses."""

    pid: int
    command: str
    since: float | None = None

