"""One row of a weights diff, and how numbers go into JSON.

JSON has no infinity or NaN, so a non-finite float is written as the string ``"inf"``,
``"-inf"`` or ``"nan"``; ``float()`` reads all three back. Every other number is a plain
JSON number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from abgate.weights.metrics import ErrorStats

__all__ = ["STATUSES", "TensorDiff", "json_float", "read_float"]

STATUSES = ("compared", "missing_in_ref", "missing_in_other", "shape_mismatch", "unsupported")


def json_float(x: float | None) -> float | str | None:
    """``x`` as JSON: finite floats unchanged, inf/-inf/nan as strings, None as null."""
    if x is None or math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def read_float(x: Any) -> float | None:
    """Inverse of :func:`json_float`."""
    return None if x is None else float(x)


@dataclass(frozen=True)
class TensorDiff:
    """One tensor name and what was found for it on each side."""

    name: str
    layer: int | None
    kind: str
    status: str  # one of STATUSES
    shape_ref: tuple[int, ...] | None
    shape_other: tuple[int, ...] | None
    dtype_ref: str | None
    dtype_other: str | None
    stats: ErrorStats | None = None  # only when status == "compared"
    byte_identical: bool = False  # stored bytes equal: other was not decoded
    note: str | None = None

    @property
    def n_elements(self) -> int:
        shape = self.shape_ref if self.shape_ref is not None else self.shape_other
        return math.prod(shape) if shape is not None else 0

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        row: dict[str, Any] = {
            "name": self.name, "layer": self.layer, "kind": self.kind, "status": self.status,
            "shape_ref": list(self.shape_ref) if self.shape_ref is not None else None,
            "shape_other": list(self.shape_other) if self.shape_other is not None else None,
            "dtype_ref": self.dtype_ref, "dtype_other": self.dtype_other,
            "n_elements": self.n_elements,
            "rel_l2": json_float(s.rel_l2) if s else None,
            "sqnr_db": json_float(s.sqnr_db) if s else None,
            "cosine": json_float(s.cosine) if s else None,
            "max_abs_err": json_float(s.max_abs_err) if s else None,
            "ref_l2": json_float(math.sqrt(s.ref_sq)) if s else None,
            "err_l2": json_float(math.sqrt(s.err_sq)) if s else None,
            "identical": s.identical if s else None,
            "byte_identical": self.byte_identical,
        }
        if self.note is not None:
            row["note"] = self.note
        return row
