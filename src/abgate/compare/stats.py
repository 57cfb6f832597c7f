"""Statistical primitives for paired A/B comparisons (pure functions, numpy/scipy).

- :func:`clustered_mean` - a mean with its standard error clustered by item
  (Miller 2024, "Adding Error Bars to Evals"), for any per-pair values (0/1 or real).
- :func:`normal_ci` / :func:`z_two_sided` / :func:`z_one_sided` - normal-theory bounds.
- :func:`mcnemar_exact` - McNemar's exact test: a two-sided binomial test of the
  discordant pairs against p = 1/2.
- :func:`item_means` / :func:`cluster_bootstrap` - per-item averages and a seeded
  percentile bootstrap of their mean that resamples items (clusters) with replacement.
- :func:`student_t_interval` - the Student-t interval of a mean, which stays honest
  when a few items carry most of the spread (where the percentile bootstrap is too
  narrow; see docs/statistics.md, "A/A calibration").
- :func:`cluster_ratio` - a ratio of per-item sums (e.g. KL per token) with the
  cluster-robust (linearised ratio-estimator) standard error; :func:`t_quantile`.
- :func:`wilson_interval` - a proportion's interval that stays inside [0, 1], at an
  effective sample size that carries the clustering.

Functions return ``nan`` where a quantity cannot be estimated (no data, one cluster);
callers turn that into ``None`` for JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

# scipy.stats is imported in the functions that use it: importing it is most of the
# CLI's start-up (every `abgate` command imports this module, few need a quantile).

__all__ = [
    "BootstrapResult",
    "cluster_bootstrap",
    "cluster_ratio",
    "clustered_mean",
    "item_means",
    "mcnemar_exact",
    "normal_ci",
    "student_t_interval",
    "t_quantile",
    "wilson_clustered",
    "wilson_interval",
    "z_one_sided",
    "z_two_sided",
]

FloatArray = NDArray[np.float64]

# Largest number of resampled values held in memory at once by the bootstrap.
_CHUNK_VALUES = 4_000_000


def z_two_sided(confidence: float) -> float:
    """The normal quantile for a two-sided interval, e.g. 1.96 for 0.95."""
    from scipy import stats

    return float(stats.norm.ppf(0.5 + confidence / 2.0))


def z_one_sided(alpha: float) -> float:
    """The normal quantile ``z_(1-alpha)`` for a one-sided test, e.g. 1.96 for 0.025."""
    from scipy import stats

    return float(stats.norm.ppf(1.0 - alpha))


def clustered_mean(values: Sequence[float], clusters: Sequence[str]) -> tuple[float, float]:
    """Mean of ``values`` and its standard error clustered by ``clusters``.

    ``SE^2 = 1/n^2 * sum_c (sum_{i in c} (x_i - mean))^2`` (Miller 2024): with one value
    per cluster this is the plain ``sd/sqrt(n)`` (population sd); repeated, identical
    values within a cluster do not shrink it. ``(nan, nan)`` with no values, and
    ``(mean, nan)`` with a single cluster, whose spread cannot be estimated.
    """
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    mean = float(x.mean())
    _, inverse = np.unique(np.asarray(clusters, dtype=str), return_inverse=True)
    sums = np.bincount(inverse, weights=x - mean)
    if sums.size < 2:
        return mean, math.nan
    return mean, float(math.sqrt(float(np.sum(sums * sums))) / x.size)


def normal_ci(estimate: float, se: float, z: float) -> tuple[float, float]:
    """``estimate -/+ z * se``; ``(nan, nan)`` when either is nan."""
    if math.isnan(estimate) or math.isnan(se):
        return math.nan, math.nan
    return estimate - z * se, estimate + z * se


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value for the discordant counts.

    ``a_only``: pairs only arm A got right; ``b_only``: only arm B. Under H0 each
    discordant pair is equally likely to go either way, so ``a_only ~ Binomial(a_only
    + b_only, 1/2)``. 1.0 when there are no discordant pairs.
    """
    if a_only < 0 or b_only < 0:
        raise ValueError("discordant counts must be non-negative")
    n = a_only + b_only
    if n == 0:
        return 1.0
    from scipy import stats

    return float(stats.binomtest(a_only, n, 0.5, alternative="two-sided").pvalue)


def item_means(values: Sequence[float], items: Sequence[str]) -> tuple[list[str], FloatArray]:
    """Average ``values`` per item: ``(sorted item ids, their means)``."""
    if len(values) != len(items):
        raise ValueError(f"{len(values)} values but {len(items)} item labels")
    if not values:
        return [], np.zeros(0)
    labels, inverse = np.unique(np.asarray(items, dtype=str), return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(values, dtype=float))
    counts = np.bincount(inverse)
    return [str(label) for label in labels], sums / counts


@dataclass(frozen=True)
class BootstrapResult:
    """Mean of the per-item values, its percentile CI and the bootstrap SD (its SE)."""

    estimate: float
    low: float
    high: float
    se: float
    n_items: int


def cluster_bootstrap(
    per_item: FloatArray, *, seed: int, n_boot: int, confidence: float
) -> BootstrapResult:
    """Percentile bootstrap of ``mean(per_item)``, resampling items with replacement.

    Each of ``n_boot`` replicates draws ``len(per_item)`` items from
    ``numpy.random.default_rng(seed)``; the CI is the ``(1-c)/2`` and ``(1+c)/2``
    percentiles of the replicate means, the SE their standard deviation. Fewer than two
    items give a nan interval and SE.
    """
    k = int(per_item.size)
    if k == 0:
        return BootstrapResult(math.nan, math.nan, math.nan, math.nan, 0)
    estimate = float(per_item.mean())
    if k < 2:
        return BootstrapResult(estimate, math.nan, math.nan, math.nan, k)
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_boot)
    rows = max(1, _CHUNK_VALUES // k)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        draws = rng.integers(0, k, size=(stop - start, k))
        replicates[start:stop] = per_item[draws].mean(axis=1)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return BootstrapResult(estimate, float(low), float(high), float(replicates.std(ddof=1)), k)


def student_t_interval(values: FloatArray, confidence: float) -> tuple[float, float, float]:
    """``mean -/+ t_(k-1) * sd / sqrt(k)`` and that SE; nan with fewer than two values."""
    k = int(values.size)
    if k < 2:
        return math.nan, math.nan, math.nan
    se = float(values.std(ddof=1)) / math.sqrt(k)
    from scipy import stats

    t = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1))
    mean = float(values.mean())
    return mean - t * se, mean + t * se, se


def t_quantile(p: float, df: int) -> float:
    """The Student-t quantile ``t_(p, df)``; nan when ``df < 1``."""
    if df < 1:
        return math.nan
    from scipy import stats

    return float(stats.t.ppf(p, df))


def cluster_ratio(sums: Sequence[float], counts: Sequence[float]) -> tuple[float, float]:
    """``R = sum(sums) / sum(counts)`` and its cluster-robust standard error.

    One entry per cluster (item): ``sums[c]`` adds a per-token quantity over the
    cluster's ``counts[c]`` tokens, so ``R`` is the token-weighted mean. The SE is the
    linearised ratio estimator with the small-sample factor ``K/(K-1)``:
    ``SE^2 = K/(K-1) * sum_c (S_c - R*T_c)^2 / (sum_c T_c)^2``. ``(nan, nan)`` with no
    tokens, ``(R, nan)`` with a single cluster.
    """
    if len(sums) != len(counts):
        raise ValueError(f"{len(sums)} sums but {len(counts)} counts")
    s, t = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    total = float(t.sum())
    if total <= 0:
        return math.nan, math.nan
    ratio = float(s.sum()) / total
    k = int(s.size)
    if k < 2:
        return ratio, math.nan
    resid = s - ratio * t
    return ratio, math.sqrt(k / (k - 1) * float(np.sum(resid * resid))) / total


def wilson_interval(p: float, n_eff: float, z: float) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed on ``n_eff`` effective
    trials; always inside [0, 1]. ``(nan, nan)`` when ``p`` is nan or ``n_eff <= 0``."""
    if math.isnan(p) or math.isnan(n_eff) or n_eff <= 0:
        return math.nan, math.nan
    z2 = z * z
    center = (p + z2 / (2 * n_eff)) / (1 + z2 / n_eff)
    half = z / (1 + z2 / n_eff) * math.sqrt(p * (1 - p) / n_eff + z2 / (4 * n_eff * n_eff))
    return max(0.0, center - half), min(1.0, center + half)


def wilson_clustered(p: float, se: float, n_samples: int, n_items: int,
                     z: float) -> tuple[float, float, float]:
    """A Wilson interval for an item-clustered proportion: ``(low, high, n_eff)``.

    The effective sample size ``n_eff = p(1-p)/SE^2`` carries the clustering (the
    design effect), capped at ``n_samples``; where it cannot be estimated (``p`` at 0
    or 1, a nan SE) it is the number of items, i.e. one observation per item.
    """
    n_eff = float(n_items)
    if not math.isnan(se) and se > 0 and 0.0 < p < 1.0:
        n_eff = min(float(n_samples), p * (1.0 - p) / (se * se))
    low, high = wilson_interval(p, n_eff, z)
    return low, high, n_eff
