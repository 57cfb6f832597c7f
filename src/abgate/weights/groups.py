"""Aggregate compared tensors by layer and by kind.

For a group of compared tensors:

- ``mean_rel_l2``: mean of the per-tensor relative errors, weighted by element count;
- ``median_rel_l2``: median over tensors (unweighted), ``max_rel_l2``: the worst tensor;
- ``min_sqnr_db``: the worst per-tensor SQNR;
- ``pooled_rel_l2`` / ``pooled_sqnr_db``: the same formulas over the group's tensors
  taken together, sqrt(sum ||other-ref||^2 / sum ||ref||^2), which weights each
  tensor by its energy rather than its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from abgate.weights.metrics import sqnr_db
from abgate.weights.names import KINDS
from abgate.weights.result import TensorDiff, json_float

__all__ = ["aggregate", "by_kind", "by_layer"]


def aggregate(rows: Sequence[TensorDiff]) -> dict[str, Any]:
    """Aggregate statistics over the compared rows of ``rows`` (others are ignored)."""
    done = [(r, r.stats) for r in rows if r.stats is not None]
    out: dict[str, Any] = {"n_tensors": len(done),
                           "n_elements": sum(r.n_elements for r, _ in done),
                           "n_identical": sum(1 for _, s in done if s.identical)}
    if not done:
        return out | dict.fromkeys(("mean_rel_l2", "median_rel_l2", "max_rel_l2", "min_sqnr_db",
                                    "pooled_rel_l2", "pooled_sqnr_db"))
    rel = np.array([s.rel_l2 for _, s in done], dtype=np.float64)
    sqnr = np.array([s.sqnr_db for _, s in done], dtype=np.float64)
    weights = np.array([r.n_elements for r, _ in done], dtype=np.float64)
    ref_sq = math.fsum(s.ref_sq for _, s in done)
    err_sq = math.fsum(s.err_sq for _, s in done)
    out |= {
        "mean_rel_l2": _weighted_mean(rel, weights),
        "median_rel_l2": float(np.median(rel)),
        "max_rel_l2": float(np.max(rel)),
        "min_sqnr_db": float(np.min(sqnr)),
        "pooled_rel_l2": _pooled_rel(ref_sq, err_sq),
        "pooled_sqnr_db": sqnr_db(ref_sq, err_sq),
    }
    return {k: json_float(v) if isinstance(v, float) else v for k, v in out.items()}


def by_layer(rows: Sequence[TensorDiff]) -> list[dict[str, Any]]:
    """One aggregate per block index, in order; tensors outside blocks come last (null)."""
    def order(layer: Hashable) -> tuple[int, int]:
        return (1, 0) if layer is None else (0, int(str(layer)))

    return _grouped(rows, "layer", lambda r: r.layer, order)


def by_kind(rows: Sequence[TensorDiff]) -> list[dict[str, Any]]:
    """One aggregate per tensor kind, in :data:`KINDS` order."""
    return _grouped(rows, "kind", lambda r: r.kind, lambda k: KINDS.index(str(k)))


def _grouped(rows: Sequence[TensorDiff], label: str, key: Callable[[TensorDiff], Hashable],
             order: Callable[[Hashable], Any]) -> list[dict[str, Any]]:
    groups: dict[Hashable, list[TensorDiff]] = {}
    for row in rows:
        if row.stats is not None:
            groups.setdefault(key(row), []).append(row)
    return [{label: k, **aggregate(groups[k])} for k in sorted(groups, key=order)]


def _weighted_mean(values: np.ndarray[Any, Any], weights: np.ndarray[Any, Any]) -> float:
    total = float(weights.sum())
    if total == 0.0:
        return float(np.mean(values))
    return float(np.dot(values, weights) / total)


def _pooled_rel(ref_sq: float, err_sq: float) -> float:
    if err_sq == 0.0:
        return 0.0
    return math.inf if ref_sq == 0.0 else math.sqrt(err_sq / ref_sq)
