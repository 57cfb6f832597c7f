"""Paired quality and speed statistics of two arms: :func:`compare_samples`.

Every number is defined in ``docs/statistics.md``. In short: pairs are (item, seed)
matched by key; quality is accuracy per arm and the paired accuracy difference with a
standard error clustered by item, McNemar's exact test and paired deltas of the health
rates; speed is the mean log ratio B/A per pair, averaged per item then across items,
with a seeded percentile bootstrap over items widened, where needed, to the Student-t
interval of the item means; the minimum detectable effects say what the sample could
have seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from abgate.compare.diagnostics import diagnostics
from abgate.compare.mde import mde
from abgate.compare.pairing import Pair, SampleLike, pair_samples
from abgate.compare.replicas import replica_bootstrap
from abgate.compare.stats import (
    BootstrapResult,
    cluster_bootstrap,
    clustered_mean,
    item_means,
    mcnemar_exact,
    normal_ci,
    student_t_interval,
    wilson_clustered,
    z_two_sided,
)
from abgate.records.comparison import (
    Accuracy,
    ArmAccuracy,
    ArmCounts,
    ArmNames,
    ArmSpeed,
    Bootstrap,
    Comparison,
    Interval,
    LogRatio,
    McNemar,
    Mde,
    PairedDelta,
    Quality,
    Rates,
    Ratio,
    SpeedMetric,
)
from abgate.records.policy import SPEED_METRICS
from abgate.records.samples import Sample
from abgate.scoring.health import clustered_accuracy

__all__ = ["RATE_FIELDS", "SPEED_METRICS", "compare_samples", "finite"]

# SPEED_METRICS (records.policy): metric -> +1 when higher is better (B/A > 1 is a
# speedup), -1 when lower is.
# Health rates compared pair by pair (0/1 per sample, seq_rep_4 in [0, 1]).
RATE_FIELDS = ("invalid", "truncated", "natural_stop", "seq_rep_4")


def finite(value: float | None) -> float | None:
    """``None`` for nan/inf/None (JSON has no nan), else the float."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _interval(estimate: float, se: float, z: float) -> Interval:
    low, high = normal_ci(estimate, se, z)
    return Interval(estimate=finite(estimate), se=finite(se), ci=(finite(low), finite(high)))


def _arm_accuracy(outcomes: Sequence[bool], items: Sequence[str], z: float) -> ArmAccuracy:
    """Accuracy of one arm, its clustered SE, and a Wilson interval (inside [0, 1]) at
    the clustering's effective sample size (:func:`wilson_clustered`)."""
    acc, se = clustered_accuracy(outcomes, items)
    low, high, n_eff = wilson_clustered(acc, se, len(outcomes), len(set(items)), z)
    return ArmAccuracy(estimate=finite(acc), se=finite(se), ci=(finite(low), finite(high)),
                       ci_method="wilson", n_effective=finite(n_eff))


def _paired_delta(pairs: Sequence[Pair], a: Sequence[float], b: Sequence[float],
                  z: float) -> PairedDelta:
    items = [p.item_id for p in pairs]
    mean_a, _ = clustered_mean(a, items)
    mean_b, _ = clustered_mean(b, items)
    diff, se = clustered_mean([y - x for x, y in zip(a, b, strict=True)], items)
    return PairedDelta(a=finite(mean_a), b=finite(mean_b), n=len(pairs),
                       diff=_interval(diff, se, z))


def _accuracy(pairs: Sequence[Pair], z: float) -> Accuracy:
    scored = [p for p in pairs if p.a.correct is not None and p.b.correct is not None]
    items = [p.item_id for p in scored]
    a = [bool(p.a.correct) for p in scored]
    b = [bool(p.b.correct) for p in scored]
    diff, se = clustered_mean([float(y) - float(x) for x, y in zip(a, b, strict=True)], items)
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return Accuracy(
        n_scored=len(scored), n_unscored=len(pairs) - len(scored), n_items=len(set(items)),
        a=_arm_accuracy(a, items, z), b=_arm_accuracy(b, items, z),
        diff=_interval(diff, se, z),
        mcnemar=McNemar(a_only_correct=a_only, b_only_correct=b_only,
                        n_discordant=a_only + b_only, p_value=mcnemar_exact(a_only, b_only)))


def _quality(pairs: Sequence[Pair], all_pairs: Sequence[Pair], z: float) -> Quality:
    rates: dict[str, PairedDelta] = {}
    for name in RATE_FIELDS:
        usable = [p for p in pairs if p.a.health_value(name) is not None
                  and p.b.health_value(name) is not None]
        rates[name] = _paired_delta(usable, [float(p.a.health_value(name)) for p in usable],
                                    [float(p.b.health_value(name)) for p in usable], z)
    rates["error"] = _paired_delta(all_pairs, [float(p.a.failed) for p in all_pairs],
                                   [float(p.b.failed) for p in all_pairs], z)
    return Quality(accuracy=_accuracy(pairs, z), rates=Rates(**rates))


def _timing(sample: Sample, metric: str) -> float | None:
    value = sample.timing.figure(metric)
    return float(value) if value is not None and _why_unmeasured(sample, metric) is None \
        else None


def _why_unmeasured(sample: Sample, metric: str) -> str | None:
    """Why a sample's ``metric`` is no measurement (None when it is one): ``nan``,
    ``inf``, ``missing`` (absent, null, not a number) or ``not positive``."""
    value = sample.timing.figure(metric)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "missing"
    try:
        value = float(value)
    except OverflowError:
        return "inf"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return None if value > 0 else "not positive"


def _unmeasured(pairs: Sequence[Pair], metric: str) -> dict[str, int]:
    """How many samples of the pairs had no measurement of ``metric``, by why."""
    counts: dict[str, int] = {}
    for side in (s for p in pairs for s in (p.a, p.b)):
        why = _why_unmeasured(side, metric)
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
    return counts


def _summary(values: np.ndarray) -> ArmSpeed:
    if not values.size:
        return ArmSpeed(mean=None, median=None)
    return ArmSpeed(mean=finite(float(values.mean())), median=finite(float(np.median(values))))


def _change(new: float | None, old: float | None) -> float | None:
    return finite(new / old - 1.0) if new is not None and old else None


def _exp(value: float) -> float | None:
    return finite(math.exp(value)) if math.isfinite(value) else None


def _speed_metric(pairs: Sequence[Pair], metric: str, *, seed: int, n_boot: int,
                  confidence: float, replicas: Mapping[str, str] | None = None
                  ) -> SpeedMetric:
    rows = [(p.item_id, _timing(p.a, metric), _timing(p.b, metric)) for p in pairs]
    usable = [(item, x, y) for item, x, y in rows if x is not None and y is not None]
    xa = np.array([x for _, x, _ in usable], dtype=float)
    xb = np.array([y for _, _, y in usable], dtype=float)
    items, per_item = item_means(list(np.log(xb / xa)), [item for item, _, _ in usable])
    boot = cluster_bootstrap(per_item, seed=seed, n_boot=n_boot, confidence=confidence)
    t_low, t_high, t_se = student_t_interval(per_item, confidence)
    # The decision interval is the wider of the two (nan-aware: nan if either is nan).
    low, high = min(boot.low, t_low), max(boot.high, t_high)
    if math.isnan(boot.low) or math.isnan(t_low):
        low = high = math.nan
    by_replica = _by_replica(per_item, items, replicas, seed, n_boot, confidence)
    if by_replica is not None and not math.isnan(low):  # a fleet: the wider still
        low, high = min(low, by_replica.low), max(high, by_replica.high)
        t_se = max(t_se, by_replica.se)
    arm_a, arm_b = _summary(xa), _summary(xb)
    sd = finite(float(np.std(per_item, ddof=1))) if len(per_item) > 1 else None
    unmeasured = _unmeasured(pairs, metric)
    extra: dict[str, Any] = {"unmeasured_samples": unmeasured} if unmeasured else {}
    return SpeedMetric(
        higher_is_better=SPEED_METRICS[metric] > 0, n_pairs=int(xa.size),
        n_items=boot.n_items, a=arm_a, b=arm_b,
        pct_change_mean=_change(arm_b.mean, arm_a.mean),
        pct_change_median=_change(arm_b.median, arm_a.median),
        log_ratio=LogRatio(estimate=finite(boot.estimate), se=finite(max(boot.se, t_se)),
                           sd=sd, ci=(finite(low), finite(high)),
                           ci_bootstrap=(finite(boot.low), finite(boot.high)),
                           ci_t=(finite(t_low), finite(t_high)),
                           **_replica_fields(by_replica)),
        ratio=Ratio(estimate=_exp(boot.estimate), ci=(_exp(low), _exp(high))), **extra)


def _by_replica(per_item: np.ndarray, items: Sequence[str],
                replicas: Mapping[str, str] | None, seed: int, n_boot: int,
                confidence: float) -> BootstrapResult | None:
    """The replica-clustered interval (``compare.replicas``) when the items ran on two
    or more replicas, else None."""
    if not replicas or len({replicas.get(i) for i in items} - {None}) < 2:
        return None
    labels = [replicas.get(i, "?") for i in items]
    result = replica_bootstrap(per_item, labels, seed=seed, n_boot=n_boot,
                               confidence=confidence)
    return None if math.isnan(result.low) else result


def _replica_fields(result: BootstrapResult | None) -> dict[str, Any]:
    if result is None:
        return {}
    return {"ci_replicas": (finite(result.low), finite(result.high)),
            "n_replicas": result.n_items}


def _mde(quality: Quality, speed: Mapping[str, SpeedMetric], confidence: float,
         power: float) -> Mde:
    z = z_two_sided(confidence)
    acc = quality.accuracy
    se_d = acc.diff.se
    se_a, se_b = acc.a.se, acc.b.se
    unpaired = math.hypot(se_a, se_b) if se_a is not None and se_b is not None else math.nan
    n_scored = int(acc.n_scored or 0)
    discordance_high = None
    if n_scored:
        from scipy import stats as sps  # lazily, as in compare/stats.py

        test = sps.binomtest(int(acc.mcnemar.n_discordant or 0), n_scored)
        discordance_high = float(test.proportion_ci(confidence_level=confidence).high)
    speed_mde: dict[str, float | None] = {}
    for metric, section in speed.items():
        se = section.log_ratio.se
        log_mde = mde(math.nan if se is None else se, z, power)
        speed_mde[metric] = finite(math.exp(log_mde) - 1.0) if math.isfinite(log_mde) else None
    return Mde(confidence=confidence, power=power, n_items=acc.n_items,
               accuracy_paired=finite(mde(se_d if se_d is not None else math.nan, z, power)),
               accuracy_unpaired=finite(mde(unpaired, z, power)),
               discordance_upper=discordance_high, speed=speed_mde)


def _check_args(seed: int, n_boot: int, confidence: float, power: float) -> None:
    if n_boot < 2:
        raise ValueError(f"n_boot must be at least 2, got {n_boot}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")


def compare_samples(
    a: Sequence[SampleLike],
    b: Sequence[SampleLike],
    *,
    seed: int = 0,
    n_boot: int = 2000,
    confidence: float = 0.95,
    arm_names: tuple[str, str] = ("A", "B"),
    power: float = 0.8,
    allow_unmatched: bool = False,
    replicas: Mapping[str, str] | None = None,
) -> Comparison:
    """Paired quality, speed, diagnostics and MDE of arm B against arm A.

    ``a``/``b`` are ``samples.jsonl`` records. Raises :class:`abgate.errors.AbgateError`
    when a key is in one arm only (unless ``allow_unmatched``) or nothing matches.
    Normal CIs and bootstrap percentile CIs are two-sided at ``confidence``; the
    bootstrap draws from ``numpy.random.default_rng(seed)`` (the same draws for every
    speed metric), so the result is a pure function of its inputs. ``replicas`` (item
    id -> the replica it ran on, a fleet A/B) adds the replica-clustered interval of
    each speed metric and widens the decision interval to it (``compare.replicas``).
    """
    _check_args(seed, n_boot, confidence, power)
    pairing = pair_samples(a, b, arm_names=arm_names, allow_unmatched=allow_unmatched)
    live = pairing.live
    z = z_two_sided(confidence)
    quality = _quality(live, pairing.pairs, z)
    speed = {metric: _speed_metric(live, metric, seed=seed, n_boot=n_boot,
                                   confidence=confidence, replicas=replicas)
             for metric in SPEED_METRICS}
    n_items = len({p.item_id for p in live})
    return Comparison(
        arms=ArmNames(a=arm_names[0], b=arm_names[1]), n_pairs=len(pairing.pairs),
        n_items=n_items, n_items_total=len({p.item_id for p in pairing.pairs}),
        pairs_per_item=len(live) / n_items if n_items else None,
        n_excluded_errors=pairing.n_excluded_errors,
        n_unmatched=ArmCounts(a=len(pairing.only_a), b=len(pairing.only_b)),
        quality=quality, speed=speed, diagnostics=diagnostics(live),
        mde=_mde(quality, speed, confidence, power),
        bootstrap=Bootstrap(seed=seed, n_boot=n_boot, confidence=confidence,
                            method="percentile; items resampled with replacement"))
