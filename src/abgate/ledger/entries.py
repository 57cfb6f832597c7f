"""What the ledger records about one directory or imported file (a :class:`Entry`) and
about each configuration measured in it (a :class:`Unit`: the run itself, each arm of
an A/B, each case of a bench or baseline, each task of an lm-eval import).

A unit's metrics are ``{name: {"value": v, "se": s, "n": n}}``: quality rates with
their standard error clustered by item, speed means over items with theirs (the same
estimators as ``abgate ab``, :mod:`abgate.compare.stats`), so ``abgate history`` can
say whether a step between two points is larger than the points' own spread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from abgate.compare.stats import clustered_mean
from abgate.identity import digest_json
from abgate.records.bench_sections import SpeedDistributions
from abgate.records.samples import Sample
from abgate.records.sections import Section
from abgate.runner.summary import SPEED_FIELDS
from abgate.scoring.health import clustered_accuracy

QUALITY_RATES = {"invalid_rate": "invalid", "truncated_rate": "truncated",
                 "error_rate": "error", "repetition": "seq_rep_4"}


class Unit(BaseModel):
    """One measured configuration inside a record."""

    name: str = ""
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    model_sha256: str | None = None
    config_digest: str | None = None
    workload_digest: str | None = None
    suite: str | None = None
    n: int = 0
    metrics: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)


class HumanVerdict(Section):
    """The engineer's latest decision on an A/B (``decisions.jsonl``'s last line), as
    the ledger keeps it beside the machine's."""

    decision: str | None = None
    relation: str | None = None
    machine_verdict: str | None = None
    arm: str | None = None
    by: str | None = None
    decided_at: str | None = None
    why: str | None = None


class LedgerVerdicts(Section):
    """An entry's verdicts (the ledger's ``verdicts`` cell): ``comparison.json``'s
    baseline and each candidate's decision, and the engineer's latest decision."""

    baseline: str | None = None
    arms: dict[str, str | None] | None = None
    human: HumanVerdict | None = None


class EntryFacts(BaseModel):
    """What the ledger knows of one record, as :class:`Entry` (read from the record) and
    :class:`LedgerRecord` (a row of the store) both hold it."""

    id: str
    kind: str
    path: str
    status: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    git_commit: str | None = None
    git_tree: str | None = None
    git_dirty: bool | None = None
    git_diff_sha256: str | None = None
    host: str | None = None
    abgate_version: str | None = None
    decision: str | None = None
    verdicts: LedgerVerdicts = Field(default_factory=LedgerVerdicts)


class Entry(EntryFacts):
    """One record: a run, A/B, bench or baseline directory, or an imported file."""

    units: list[Unit] = Field(default_factory=list)



class LedgerRecord(EntryFacts):
    """One row of the ledger's ``records`` table (``ledger.store``): an :class:`Entry`'s
    fields without its units, and the ledger's own bookkeeping."""

    added_at: float | None = None
    updated_at: float | None = None
    moved_from: str | None = None
    missing_since: float | None = None

    @property
    def human_decision(self) -> str | None:
        """The engineer's decision recorded beside the machine's (``abgate decide``)."""
        human = self.verdicts.human
        return str(human.decision) if human is not None and human.decision else None

def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def metric(value: float | None, se: float | None, n: int) -> dict[str, float | int | None]:
    return {"value": _finite(value), "se": _finite(se), "n": n}


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _rate(x: Any) -> float | None:
    return float(x) if isinstance(x, bool) else _number(x)


def sample_metrics(samples: Sequence[Sample | Mapping[str, Any]]
                   ) -> dict[str, dict[str, Any]]:
    """Quality and speed metrics of one configuration's (non-warm-up) samples (abgate's
    own, or an import's in the same shape)."""
    typed = [s if isinstance(s, Sample) else Sample.model_validate(s) for s in samples]
    live = [s for s in typed if s.measured]
    out: dict[str, dict[str, Any]] = {}
    scored = [(s.correct, str(s.item_id)) for s in live if s.correct is not None]
    if scored:
        acc, se = clustered_accuracy([bool(c) for c, _ in scored], [i for _, i in scored])
        out["accuracy"] = metric(acc, se, len(scored))
    for name, field in QUALITY_RATES.items():
        pairs = [(v, str(s.item_id)) for s in live
                 if (v := _rate(getattr(s.health, field, None))) is not None]
        if pairs:
            mean, se = clustered_mean([v for v, _ in pairs], [i for _, i in pairs])
            out[name] = metric(mean, se, len(pairs))
    for field in SPEED_FIELDS:
        pairs = [(v, str(s.item_id)) for s in live
                 if (v := _number(s.timing.figure(field))) is not None and math.isfinite(v)]
        if pairs:
            mean, se = clustered_mean([v for v, _ in pairs], [i for _, i in pairs])
            out[field] = metric(mean, se, len(pairs))
    return out


def distribution_metrics(speed: SpeedDistributions) -> dict[str, dict[str, Any]]:
    """Metrics from a bench case's ``speed`` distributions (mean, cv, n): the SE of the
    mean is ``cv * mean / sqrt(n)``."""
    out: dict[str, dict[str, Any]] = {}
    for field in SPEED_FIELDS:
        d = speed.of(field)
        mean, cv, n = _number(d.mean), _number(d.cv), d.n
        if mean is None:
            continue
        se = cv * abs(mean) / math.sqrt(n) if cv is not None and n > 1 else None
        out[field] = metric(mean, se, n)
    return out


def config_digest(engine: str | None, effective: Any, fallback: Any = None) -> str | None:
    """``sha256:`` of the engine name and the effective configuration it reported after
    load (``fallback``, e.g. the typed engine args, when it never loaded)."""
    basis = effective if effective else fallback
    if engine is None and basis is None:
        return None
    return digest_json({"engine": engine, "config": basis})


def workload_digest(spec: Mapping[str, Any], keys: Iterable[str]) -> str:
    """``sha256:`` of the spec fields that define the work (items, seeds, sampling...)."""
    return digest_json({k: spec.get(k) for k in keys})
