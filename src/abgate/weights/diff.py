"""Compare two checkpoints tensor by tensor: :func:`diff_checkpoints`.

Tensors are matched by exact name. For each name found on both sides with the same
logical shape, both tensors are decoded to float32, compared (float64 sums), and dropped
before the next name is read, so at most one pair of decoded tensors is alive at a time.
When the two stored tensors have the same type and the same bytes, only the reference is
decoded (its norm is still needed for pooled group statistics).

The compared tensors are aggregated by layer and by kind (:func:`aggregate`); for a
group of compared tensors:

- ``mean_rel_l2``: mean of the per-tensor relative errors, weighted by element count;
- ``median_rel_l2``: median over tensors (unweighted), ``max_rel_l2``: the worst tensor;
- ``min_sqnr_db``: the worst per-tensor SQNR;
- ``pooled_rel_l2`` / ``pooled_sqnr_db``: the same formulas over the group's tensors
  taken together, sqrt(sum ||other-ref||^2 / sum ||ref||^2), which weights each
  tensor by its energy rather than its size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from abgate import __version__, safefs
from abgate.identity import DEFAULT_CACHE
from abgate.redact import redact
from abgate.weights.metrics import ErrorStats, error_stats, ref_only_stats, same_bytes, sqnr_db
from abgate.weights.names import KINDS, layer_index, tensor_kind
from abgate.weights.readers import Checkpoint, TensorInfo, UnsupportedTensor, open_checkpoint
from abgate.weights.result import STATUSES, TensorDiff, json_float
from abgate.weights.tables import outlier_warning

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Progress", "aggregate", "by_kind", "by_layer", "compare",
           "describe", "diff_checkpoints", "document", "status_counts"]

SCHEMA, SCHEMA_VERSION = "abgate.weights_diff", 1

Progress = Callable[[int, int, str], None]
"""Called as ``progress(done, total, name)`` after each tensor name is handled."""


def diff_checkpoints(ref: Path, other: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Per-tensor and per-group error of ``other`` against ``ref``, as a JSON-able dict.

    ``ref`` and ``other`` are each a ``.gguf`` file, a ``.safetensors`` file or a directory
    of ``.safetensors`` shards. Raises :class:`abgate.errors.UsageError` for a path that is
    missing, of an unsupported kind, or unreadable.
    """
    a, b = open_checkpoint(Path(ref)), open_checkpoint(Path(other))
    rows = list(compare(a, b, progress))
    return document({"ref": describe(a), "other": describe(b)}, a, b, rows,
                    _warnings(a, b, status_counts(rows)))


def write_diff(path: Path, doc: dict[str, Any]) -> Path:
    """A weights diff ``doc`` written to ``path`` whole or not at all, never through a
    link, secrets redacted: the one writer of a weights diff's JSON (``abgate
    weights-diff --json``, an A/B's ``weights-diff-<arm>.json``)."""
    safefs.write_atomic(path, (json.dumps(redact(doc), indent=1, allow_nan=False)
                               + "\n").encode())
    return path


def arm_diff_path(out: Path, arm: str) -> Path:
    """Where an A/B directory ``out`` keeps candidate ``arm``'s weights diff."""
    return out / f"weights-diff-{arm}.json"


def diff_arm_checkpoints(base: Path, models: Mapping[str, Path], out: Path) -> list[Path]:
    """``weights-diff-<arm>.json`` in ``out`` for each candidate arm of ``models`` whose
    checkpoint differs from the baseline's ``base``."""
    return [write_diff(arm_diff_path(out, arm), diff_checkpoints(base, model))
            for arm, model in models.items() if model != base]


def status_counts(rows: Sequence[TensorDiff]) -> dict[str, int]:
    """How many of ``rows`` have each status, in :data:`STATUSES` order."""
    return {status: sum(1 for r in rows if r.status == status) for status in STATUSES}


def document(sides: dict[str, Any], a: Checkpoint, b: Checkpoint, rows: Sequence[TensorDiff],
             warnings: list[str]) -> dict[str, Any]:
    """A weights diff (a checkpoint's, ``runtime.diff_loaded``'s): the schema, ``sides``
    (each side's identity), the summary, the groups by kind and by layer, the tensor
    rows, and ``warnings`` with the outliers' after them."""
    tensors = [r.to_json() for r in rows]
    outliers = outlier_warning(tensors)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "abgate_version": __version__,
        **sides,
        "summary": {"n_tensors_ref": len(a.tensors), "n_tensors_other": len(b.tensors),
                    **{f"n_{status}": n for status, n in status_counts(rows).items()},
                    "overall": aggregate(rows)},
        "groups": {"by_kind": by_kind(rows), "by_layer": by_layer(rows)},
        "tensors": tensors,
        "warnings": warnings + ([outliers] if outliers else []),
    }


def compare(a: Checkpoint, b: Checkpoint, progress: Progress | None = None
            ) -> Iterator[TensorDiff]:
    """One :class:`TensorDiff` per name in either checkpoint: ``a``'s order, then ``b``'s."""
    names = list(a.tensors) + [n for n in b.tensors if n not in a.tensors]
    for done, name in enumerate(names, start=1):
        yield _compare_one(a, b, name)
        if progress is not None:
            progress(done, len(names), name)


def describe(ckpt: Checkpoint) -> dict[str, Any]:
    """Identity of a checkpoint: path, format, and each file's size and SHA-256."""
    hashed = [DEFAULT_CACHE.hash(f) for f in ckpt.files]
    sizes = [h.size for h in hashed]
    files = [{"path": str(f.resolve()), "size_bytes": h.size, "sha256": h.sha256}
             for f, h in zip(ckpt.files, hashed, strict=True)]
    return {
        "path": str(ckpt.path.resolve()),
        "format": ckpt.format,
        "size_bytes": sum(sizes),
        "sha256": files[0]["sha256"] if ckpt.path.is_file() else None,
        "files": files,
        "n_tensors": len(ckpt.tensors),
    }


def _row(name: str, ia: TensorInfo | None, ib: TensorInfo | None, status: str,
         stats: ErrorStats | None = None, byte_identical: bool = False,
         note: str | None = None) -> TensorDiff:
    return TensorDiff(
        name=name, layer=layer_index(name), kind=tensor_kind(name), status=status,
        shape_ref=ia.shape if ia else None, shape_other=ib.shape if ib else None,
        dtype_ref=ia.dtype if ia else None, dtype_other=ib.dtype if ib else None,
        stats=stats, byte_identical=byte_identical, note=note)


def _compare_one(a: Checkpoint, b: Checkpoint, name: str) -> TensorDiff:
    ia, ib = a.tensors.get(name), b.tensors.get(name)
    if ia is None:
        return _row(name, ia, ib, "missing_in_ref")
    if ib is None:
        return _row(name, ia, ib, "missing_in_other")
    if ia.shape != ib.shape:
        note = f"shape {list(ia.shape)} in ref, {list(ib.shape)} in other"
        return _row(name, ia, ib, "shape_mismatch", note=note)
    try:
        if ia.dtype == ib.dtype and same_bytes(a.raw(name), b.raw(name)):
            return _row(name, ia, ib, "compared", ref_only_stats(a.load(name)),
                        byte_identical=True)
        ref = a.load(name)
        other = b.load(name)
        stats = error_stats(ref, other)
        del ref, other  # drop this pair before the next name is read
    except UnsupportedTensor as exc:
        return _row(name, ia, ib, "unsupported", note=str(exc))
    return _row(name, ia, ib, "compared", stats)


def _warnings(a: Checkpoint, b: Checkpoint, counts: dict[str, int]) -> list[str]:
    out: list[str] = []
    if counts["compared"] == 0 and a.tensors and b.tensors:
        out.append("no tensor name is in both checkpoints; tensors are matched by exact name"
                   + (f" and {a.format} vs {b.format} names differ" if a.format != b.format
                      else ""))
    for status in ("missing_in_ref", "missing_in_other", "shape_mismatch", "unsupported"):
        if counts[status]:
            out.append(f"{counts[status]} tensor(s) {status.replace('_', ' ')}")
    return out


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
