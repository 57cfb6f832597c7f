"""The replica as a cluster in the speed interval of a fleet A/B (issue 33).

A pair never mixes hardware (both arms of an item run on one replica), but the ratio
of two arms can depend on the host: a replica with a fixed overhead per request, a
slower memory bus, another CPU model (a declared host difference) shifts B/A on every
item it runs. Items are then not independent draws: they are nested in replicas. The
interval here is a two-stage (hierarchical) percentile bootstrap of the mean per-item
log ratio: replicas are drawn with replacement, then items within each drawn replica.
Replicas that agree give about the item-level interval; replicas that disagree widen
it to cover them. One replica (or none known): no interval (nan), the item-level
interval stands alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from abgate.compare.stats import BootstrapResult, FloatArray

__all__ = ["replica_bootstrap"]


def replica_bootstrap(per_item: FloatArray, replicas: Sequence[str], *, seed: int,
                      n_boot: int, confidence: float) -> BootstrapResult:
    """Mean of ``per_item`` and its two-stage bootstrap interval over ``replicas``
    (one label per item); ``n_items`` of the result is the number of replicas."""
    if len(replicas) != int(per_item.size):
        raise ValueError(f"{per_item.size} items but {len(replicas)} replica labels")
    labels, inverse = np.unique(np.asarray(replicas, dtype=str), return_inverse=True)
    groups = [per_item[inverse == g] for g in range(len(labels))]
    estimate = float(per_item.mean()) if per_item.size else math.nan
    if len(groups) < 2:
        return BootstrapResult(estimate, math.nan, math.nan, math.nan, len(groups))
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_boot)
    for r in range(n_boot):
        drawn = rng.integers(0, len(groups), size=len(groups))
        total = count = 0.0
        for g in drawn:
            values = groups[int(g)]
            total += float(values[rng.integers(0, values.size, size=values.size)].sum())
            count += values.size
        replicates[r] = total / count
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return BootstrapResult(estimate, float(low), float(high),
                           float(replicates.std(ddof=1)), len(groups))
