"""``abgate history METRIC``: one metric over time for the matching configurations,
with step changes flagged and their evidence.

Points are ledger units (a run, an A/B arm, a bench case, an imported task) ordered by
start time, in *series* of one configuration each: the same engine, model, effective
configuration digest, workload digest and suite. Only complete records count unless
``all_status`` is set.

The step rule (also in docs/ledger.md): consecutive points ``p`` -> ``q`` of one
series are a **step** when both have a standard error and

    |q - p| > z * sqrt(se_p^2 + se_q^2)      (z = 1.96: a two-sided 95% test), and
    |q - p| >= min_change * |p|              (speed metrics only; default 0.02)

that is, the change is larger than the two runs' own spread allows, and (for speed)
at least the default policy's 2% band, below which load bursts and position effects
already move a run on a shared host. A pair without a standard error on either side
is "not judged". Each step's evidence states the numbers that decided it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import BaseModel

from abgate.errors import UsageError
from abgate.ledger.store import Ledger
from abgate.runner.summary import SPEED_FIELDS

Z = 1.96
DEFAULT_MIN_CHANGE = 0.02
SERIES_KEYS = ("engine", "model", "config_digest", "workload_digest", "suite")


class SeriesKey(NamedTuple):
    """What one series holds equal (:data:`SERIES_KEYS`): the engine, model, effective
    configuration, workload and suite."""

    engine: str | None
    model: str | None
    config_digest: str | None
    workload_digest: str | None
    suite: str | None


class MetricValue(BaseModel):
    """One metric of a unit as the ledger stores it (``entries.metric``)."""

    value: float | None = None
    se: float | None = None
    n: int | None = None


class UnitRow(BaseModel):
    """A ledger unit joined with its record (``Ledger.units``)."""

    record_id: str
    name: str
    path: str
    kind: str
    started_at: float | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    status: str | None = None
    missing_since: float | str | None = None
    engine: str | None = None
    model: str | None = None
    config_digest: str | None = None
    workload_digest: str | None = None
    suite: str | None = None
    metrics: dict[str, MetricValue] = {}

    def series_key(self) -> SeriesKey:
        return SeriesKey(self.engine, self.model, self.config_digest, self.workload_digest,
                         self.suite)


@dataclass
class HistoryPoint:
    record_id: str
    unit: str
    path: str
    kind: str
    started_at: float | None
    git_commit: str | None
    git_dirty: bool | None
    status: str | None
    missing: bool
    value: float | None
    se: float | None
    n: int
    step: str | None = None  # "up" | "down" when flagged
    evidence: str = ""


@dataclass
class Series:
    key: SeriesKey
    points: list[HistoryPoint] = field(default_factory=list)

    @property
    def label(self) -> str:
        k = self.key
        return (f"{k.engine} · {short(k.model)} · config {short(k.config_digest)} "
                f"· {k.suite} {short(k.workload_digest)}")


@dataclass
class History:
    metric: str
    series: list[Series]
    min_change: float

    @property
    def steps(self) -> list[tuple[Series, HistoryPoint]]:
        return [(s, p) for s in self.series for p in s.points if p.step]


def short(text: Any, n: int = 12) -> str:
    if not isinstance(text, str) or not text:
        return "-"
    text = text.removeprefix("sha256:")
    return str(text.rsplit("/", 1)[-1][-40:] if "/" in text else text[:n])


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}"


def judge(prev: HistoryPoint, cur: HistoryPoint, speed: bool, min_change: float) -> None:
    """Flag ``cur`` as a step from ``prev`` when the rule holds; fill its evidence."""
    if prev.value is None or cur.value is None:
        return
    delta = cur.value - prev.value
    rel = delta / abs(prev.value) if prev.value else math.inf if delta else 0.0
    if prev.se is None or cur.se is None:
        cur.evidence = (f"{_fmt(prev.value)} -> {_fmt(cur.value)}: not judged (no standard "
                        "error on " + ("both sides" if prev.se is None and cur.se is None
                                       else "one side") + ")")
        return
    bound = Z * math.sqrt(prev.se ** 2 + cur.se ** 2)
    beyond = abs(delta) > bound
    big = (not speed) or abs(rel) >= min_change
    where = f"{_fmt(prev.value)} -> {_fmt(cur.value)} ({rel:+.1%})"
    noise = f"|delta| {_fmt(abs(delta))} {'>' if beyond else '<='} 1.96*sqrt(se1^2+se2^2) " \
            f"= {_fmt(bound)}"
    if beyond and big:
        cur.step = "up" if delta > 0 else "down"
        cur.evidence = f"STEP {where}: {noise}" + (
            f", and |change| >= {min_change:.0%}" if speed else "")
    elif beyond:
        cur.evidence = f"{where}: {noise}, but |change| < {min_change:.0%} (not a step)"
    else:
        cur.evidence = f"{where}: {noise} (within the runs' spread)"


def history(ledger: Ledger, metric: str, *, model: str | None = None,
            engine: str | None = None, config: str | None = None, suite: str | None = None,
            workload: str | None = None, unit: str | None = None, all_status: bool = False,
            min_change: float = DEFAULT_MIN_CHANGE) -> History:
    rows = [UnitRow.model_validate(r) for r in ledger.units(
        model=model, engine=engine, config_digest=config, suite=suite,
        workload_digest=workload, name=unit, status=None if all_status else "complete")]
    if not rows:
        raise UsageError("no recorded runs match these filters (abgate ledger ls lists them)")
    if not any(metric in r.metrics for r in rows):
        names = sorted({m for r in rows for m in r.metrics})
        raise UsageError(f"no matching run records metric {metric!r}; recorded: "
                         + ", ".join(names))
    by_key: dict[SeriesKey, Series] = {}
    for r in rows:
        m = r.metrics.get(metric)
        if m is None:
            continue
        key = r.series_key()
        series = by_key.setdefault(key, Series(key))
        series.points.append(HistoryPoint(
            record_id=r.record_id, unit=r.name, path=r.path, kind=r.kind,
            started_at=r.started_at, git_commit=r.git_commit, git_dirty=r.git_dirty,
            status=r.status, missing=r.missing_since is not None, value=m.value,
            se=m.se, n=m.n or 0))
    speed = metric in SPEED_FIELDS
    for series in by_key.values():
        for prev, cur in zip(series.points, series.points[1:], strict=False):
            judge(prev, cur, speed, min_change)
    ordered = sorted(by_key.values(), key=lambda s: (-len(s.points), s.label))
    return History(metric, ordered, min_change)
