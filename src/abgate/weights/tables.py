"""The weights diff as a reviewer reads it, from a diff's JSON tensor rows: a layer x
projection table of relative L2 and the min-max range per projection kind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from abgate.weights.names import KINDS

__all__ = ["OUTLIER_REL_L2", "PROJECTIONS", "kind_ranges", "layer_projection_table",
           "outlier_warning"]

# A relative L2 this large is no quantization's rounding (8-bit ~1e-2, 4-bit ~1e-1): a
# tensor read transposed or with the wrong scale gives ~sqrt(2); the table flags it.
OUTLIER_REL_L2 = 0.5

# The per-layer projections a fast path's kernels touch, in the order a reader expects.
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up",
               "ffn_gate_up", "ffn_down", "ffn_router")


def _rel(row: Mapping[str, Any]) -> float | None:
    value = row.get("rel_l2")
    if row.get("status") != "compared" or not isinstance(value, int | float):
        return None
    return float(value) if value == value else None  # NaN is not a figure


def layer_projection_table(tensors: Sequence[Mapping[str, Any]]
                           ) -> tuple[list[str], list[tuple[int, dict[str, float]]]]:
    """(projection kinds present, [(layer, {kind: relative L2})] by layer). A layer with
    two tensors of one kind (a weight and a bias) shows the larger error."""
    cells: dict[int, dict[str, float]] = {}
    for row in tensors:
        layer, kind, rel = row.get("layer"), row.get("kind"), _rel(row)
        if isinstance(layer, int) and kind in PROJECTIONS and rel is not None:
            cell = cells.setdefault(layer, {})
            cell[str(kind)] = max(rel, cell.get(str(kind), rel))
    kinds = [k for k in PROJECTIONS if any(k in c for c in cells.values())]
    return kinds, sorted(cells.items())


def kind_ranges(tensors: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, float, float]]:
    """(kind, tensors, min relative L2, max relative L2) per kind, in KINDS order."""
    found: dict[str, list[float]] = {}
    for row in tensors:
        rel = _rel(row)
        if rel is not None:
            found.setdefault(str(row.get("kind")), []).append(rel)
    order = {k: i for i, k in enumerate(KINDS)}
    return [(k, len(v), min(v), max(v))
            for k, v in sorted(found.items(), key=lambda kv: order.get(kv[0], len(order)))]


def outlier_warning(tensors: Sequence[Mapping[str, Any]],
                    threshold: float = OUTLIER_REL_L2) -> str | None:
    """A warning naming the compared tensors whose relative L2 is at least ``threshold``
    (a layout or dequantization error is likelier than quantization), or None."""
    bad = [str(row.get("name")) for row in tensors
           if (rel := _rel(row)) is not None and rel >= threshold]
    if not bad:
        return None
    shown = ", ".join(bad[:5]) + (f", ... ({len(bad) - 5} more)" if len(bad) > 5 else "")
    return (f"{len(bad)} tensor(s) with relative L2 >= {threshold} ({shown}): beyond any "
            "quantization's rounding; a transposed or mis-scaled read is likelier")
