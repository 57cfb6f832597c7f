"""Read an A/B directory into one object the renderers share (read-only, no analysis).

Only saved records are read: ``ab.json``, ``comparison.json`` and per arm ``run.json``,
``summary.json`` (rebuilt from ``samples.jsonl`` when missing, as the runner would),
``samples.jsonl`` (reduced to the few fields the plots need) and the optional
``bench.json``. A directory that is not an analysed A/B is a :class:`UsageError`.
Records are read through their typed models (:mod:`abgate.runner.documents`, older
schema versions upgraded on the way in) and through :func:`abgate.redact.redact`, so
that a report never shows a secret, even from records written before redaction covered
it. Renderers read them by attribute: ``AbData.record`` (``ab.json``), ``AbData.analysis``
(``comparison.json``, its policy's limits as ``AbData.policy``), ``Arm.record`` and
``Arm.stats`` (``run.json``, ``summary.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.ab.decision import read_decisions
from abgate.errors import UsageError
from abgate.records.comparison import ArmResult, Comparison, ComparisonDoc, Verdict
from abgate.records.documents import AbRecord, ExperimentArm, RunRecord
from abgate.records.policy import Policy
from abgate.records.samples import Sample
from abgate.records.sections import Spec
from abgate.records.side_documents import AbBenchDocument, DecisionRecord
from abgate.redact import redact
from abgate.report.fmt import as_float
from abgate.report.views import WeightsDiff
from abgate.runner import records as rec
from abgate.runner.documents import read_document, read_record
from abgate.runner.samples import load_samples
from abgate.runner.summary import Summary, summarize
from abgate.safejson import read_json
from abgate.schema import first_error

AB_FILE, COMPARISON_FILE, BENCH_FILE = "ab.json", "comparison.json", "bench.json"
SPEED_KEYS = ("steady_decode_tps", "prefill_tps", "ttft_s")


@dataclass(frozen=True)
class Point:
    """The fields of one measured sample that plots and pairing need."""

    key: str
    error: bool
    correct: bool | None
    tokens: float | None
    rep: float | None
    output_sha: str | None
    speed: Mapping[str, float | None]


@dataclass
class Arm:
    name: str
    record: RunRecord | None = None  # run.json, when the arm has one
    stats: Summary | None = None  # summary.json, or rebuilt from the samples
    points: list[Point] = field(default_factory=list)
    bench: AbBenchDocument | None = None

    @property
    def spec(self) -> Spec | None:
        """The arm's recorded spec (None when the arm has no ``run.json``)."""
        return self.record.spec if self.record is not None else None

    def quality(self, name: str) -> Any:
        """One field of the summary's ``quality`` (a typed one or one kept as written:
        ``n_scored``, ``truncated_rate``...); None when absent or there is no summary."""
        return getattr(self.stats.quality, name, None) if self.stats is not None else None


@dataclass
class AbData:
    """Everything a report shows. ``arms`` keeps the experiment's order."""

    record: AbRecord
    arms: dict[str, Arm]
    baseline: str
    analysis: ComparisonDoc = field(default_factory=ComparisonDoc)  # comparison.json
    weights: dict[str, WeightsDiff] = field(default_factory=dict)  # weights-diff*.json
    decisions: list[DecisionRecord] = field(default_factory=list)  # oldest first

    @property
    def policy(self) -> Policy | None:
        """The policy the verdicts were given under (``comparison.json``; None when the
        A/B has not been analysed)."""
        return self.analysis.policy

    def arm_config(self, arm: str) -> ExperimentArm:
        """The arm's table in the experiment file, as recorded (empty when absent)."""
        return self.record.experiment.arms.get(arm) or ExperimentArm()

    @property
    def candidates(self) -> list[str]:
        return [name for name in self.arms if name != self.baseline]

    @property
    def ordered(self) -> list[str]:
        """The baseline first, then the candidates (the order of plot colours)."""
        return [self.baseline, *self.candidates]

    def result_of(self, arm: str) -> ArmResult:
        """One candidate's comparison and verdict, typed (empty when not recorded)."""
        return self.analysis.comparisons.get(arm) or ArmResult()

    def arm_comparison(self, arm: str) -> Comparison:
        return self.result_of(arm).comparison

    def arm_verdict(self, arm: str) -> Verdict:
        return self.result_of(arm).verdict


def to_point(sample: Sample) -> Point:
    tokens = sample.output.tokens
    return Point(
        key=str(sample.key),
        error=sample.failed,
        correct=sample.correct,
        tokens=as_float(tokens if tokens is not None else sample.health.output_tokens),
        rep=as_float(sample.health.seq_rep_4),
        output_sha=sample.output_sha(),
        speed={k: as_float(sample.timing.figure(k)) for k in SPEED_KEYS},
    )


def _load_arm(out: Path, name: str) -> Arm:
    arm_dir = out / "arms" / name
    arm = Arm(name)
    if (arm_dir / rec.RUN_FILE).exists():
        arm.record = read_record(arm_dir / rec.RUN_FILE, "ab-arm", model=RunRecord,
                                 redacted=True)
    samples = load_samples(arm_dir / rec.SAMPLES_FILE)
    if (arm_dir / rec.SUMMARY_FILE).exists():
        arm.stats = read_document(arm_dir / rec.SUMMARY_FILE, Summary, redacted=True)
    elif samples:
        arm.stats = summarize(samples)
    if samples and arm.stats is not None and arm.stats.quality.counts is None:
        # a summary written before abgate counted: the counts from the samples
        arm.stats.quality.counts = summarize(samples).quality.counts
    arm.points = [to_point(s) for s in samples if s.measured]
    if (arm_dir / BENCH_FILE).exists():
        arm.bench = read_document(arm_dir / BENCH_FILE, AbBenchDocument, redacted=True)
    return arm


def load_ab(out: Path) -> AbData:
    """Read ``out``; a missing or unanalysed directory is a one-line UsageError."""
    if not out.is_dir():
        raise UsageError(f"{out}: no such A/B directory")
    if not (out / AB_FILE).is_file():
        raise UsageError(f"{out}: not an A/B directory (no {AB_FILE})")
    if not (out / COMPARISON_FILE).is_file():
        raise UsageError(f"{out}: no {COMPARISON_FILE}; the A/B has not been analysed "
                         "(abgate ab --resume DIR finishes and analyses it)")
    ab = read_record(out / AB_FILE, "ab", model=AbRecord, redacted=True)
    analysis = read_document(out / COMPARISON_FILE, ComparisonDoc, redacted=True)
    baseline = ab.experiment.baseline
    if not ab.experiment.arms or baseline not in ab.experiment.arms:
        raise UsageError(f"{out / AB_FILE}: no experiment arms or baseline recorded")
    arms = {name: _load_arm(out, name) for name in ab.experiment.arms}
    weights = {}
    for path in sorted(out.glob("weights-diff*.json")):  # from: abgate weights-diff --json
        doc = redact(read_json(path, where=f"{path} (weights diff)"))
        try:
            weights[path.name] = WeightsDiff.model_validate(doc)
        except ValidationError as exc:
            raise UsageError(f"{path}: not a weights diff ({_first_error(exc)})") from None
    decisions = [DecisionRecord.model_validate(redact(d.model_dump()))
                 for d in read_decisions(out)]
    return AbData(record=ab, arms=arms, baseline=baseline,
                  analysis=analysis, weights=weights, decisions=decisions)


def _first_error(exc: ValidationError) -> str:
    err = first_error(exc)
    return f"{err.dotted or 'document'}: {err.message}"


def paired_points(data: AbData, arm: str) -> list[tuple[Point, Point]]:
    """(baseline, arm) samples matched by key, error pairs left out, in key order."""
    base = {p.key: p for p in data.arms[data.baseline].points}
    pairs = [(base[p.key], p) for p in data.arms[arm].points
             if p.key in base and not p.error and not base[p.key].error]
    return sorted(pairs, key=lambda pair: pair[0].key)
