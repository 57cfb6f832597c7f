"""Read an A/B directory into one object the renderers share (read-only, no analysis).

Only saved records are read: ``ab.json``, ``comparison.json`` and per arm ``run.json``,
``summary.json`` (rebuilt from ``samples.jsonl`` when missing, as the runner would),
``samples.jsonl`` (reduced to the few fields the plots need) and the optional
``bench.json``. A directory that is not an analysed A/B is a :class:`UsageError`.
Documents are read through :func:`abgate.redact.redact`, so that a report never shows
a secret, even from records written before redaction covered it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate.ab.decision import read_decisions
from abgate.compare.results import (
    ArmResult,
    Comparison,
    ComparisonDoc,
    Verdict,
    read_comparison_doc,
)
from abgate.errors import AbgateError, UsageError
from abgate.redact import redact
from abgate.report.fmt import as_float, dig
from abgate.runner import records as rec
from abgate.runner.summary import summarize

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
    run: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    bench: dict[str, Any] | None = None


@dataclass
class AbData:
    """Everything a report shows. ``arms`` keeps the experiment's order."""

    ab: dict[str, Any]
    comparison: dict[str, Any]  # comparison.json as read (for the sections that read keys)
    arms: dict[str, Arm]
    baseline: str
    analysis: ComparisonDoc = field(default_factory=ComparisonDoc)  # the same, typed
    weights: dict[str, dict[str, Any]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # oldest first

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

    def verdict_of(self, arm: str) -> dict[str, Any]:
        found = dig(self.comparison, "comparisons", arm, "verdict")
        return found if isinstance(found, dict) else {}

    def comparison_of(self, arm: str) -> dict[str, Any]:
        found = dig(self.comparison, "comparisons", arm, "comparison")
        return found if isinstance(found, dict) else {}


def _read(path: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = redact(rec.read_json(path))  # records from any version
        return doc
    except AbgateError as exc:
        raise UsageError(str(exc)) from None


def _output_sha(sample: Mapping[str, Any]) -> str | None:
    output = sample.get("output") or {}
    sha = output.get("sha256")
    if isinstance(sha, str):
        return sha
    ids = output.get("token_ids")
    if isinstance(ids, list):
        return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
    return None


def to_point(sample: Mapping[str, Any]) -> Point:
    tokens = dig(sample, "output", "tokens")
    if tokens is None:
        tokens = dig(sample, "health", "output_tokens")
    correct = sample.get("correct")
    return Point(
        key=str(sample.get("key")),
        error=sample.get("finish_reason") == "error" or bool(dig(sample, "health", "error")),
        correct=correct if isinstance(correct, bool) else None,
        tokens=as_float(tokens),
        rep=as_float(dig(sample, "health", "seq_rep_4")),
        output_sha=_output_sha(sample),
        speed={k: as_float(dig(sample, "timing", k)) for k in SPEED_KEYS},
    )


def _load_arm(out: Path, name: str) -> Arm:
    arm_dir = out / "arms" / name
    arm = Arm(name)
    if (arm_dir / rec.RUN_FILE).exists():
        arm.run = _read(arm_dir / rec.RUN_FILE)
    try:
        samples = rec.read_samples(arm_dir / rec.SAMPLES_FILE)
    except AbgateError as exc:
        raise UsageError(str(exc)) from None
    if (arm_dir / rec.SUMMARY_FILE).exists():
        arm.summary = _read(arm_dir / rec.SUMMARY_FILE)
    elif samples:
        arm.summary = summarize(samples)
    quality = arm.summary.get("quality")
    if samples and isinstance(quality, dict) and "counts" not in quality:
        # a summary written before abgate counted: the counts from the samples
        arm.summary["quality"] = {**quality, "counts": summarize(samples)["quality"]["counts"]}
    arm.points = [to_point(s) for s in samples if not s.get("warmup")]
    if (arm_dir / BENCH_FILE).exists():
        arm.bench = _read(arm_dir / BENCH_FILE)
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
    ab = _read(out / AB_FILE)
    comparison = _read(out / COMPARISON_FILE)
    try:
        analysis = read_comparison_doc(comparison, str(out / COMPARISON_FILE))
    except AbgateError as exc:
        raise UsageError(str(exc)) from None
    arm_names = dig(ab, "experiment", "arms")
    baseline = dig(ab, "experiment", "baseline") or comparison.get("baseline")
    if not isinstance(arm_names, Mapping) or not arm_names or not isinstance(baseline, str) \
            or baseline not in arm_names:
        raise UsageError(f"{out / AB_FILE}: no experiment arms or baseline recorded")
    arms = {str(name): _load_arm(out, str(name)) for name in arm_names}
    weights = {}
    for path in sorted(out.glob("weights-diff*.json")):  # from: abgate weights-diff --json
        try:
            weights[path.name] = redact(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{path}: unreadable weights diff ({exc})") from None
    return AbData(ab=ab, comparison=comparison, arms=arms, baseline=str(baseline),
                  analysis=analysis, weights=weights,
                  decisions=[redact(d) for d in read_decisions(out)])


def paired_points(data: AbData, arm: str) -> list[tuple[Point, Point]]:
    """(baseline, arm) samples matched by key, error pairs left out, in key order."""
    base = {p.key: p for p in data.arms[data.baseline].points}
    pairs = [(base[p.key], p) for p in data.arms[arm].points
             if p.key in base and not p.error and not base[p.key].error]
    return sorted(pairs, key=lambda pair: pair[0].key)
