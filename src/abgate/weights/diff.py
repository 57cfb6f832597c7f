"""Compare two checkpoints tensor by tensor: :func:`diff_checkpoints`.

Tensors are matched by exact name. For each name found on both sides with the same
logical shape, both tensors are decoded to float32, compared (float64 sums), and dropped
before the next name is read, so at most one pair of decoded tensors is alive at a time.
When the two stored tensors have the same type and the same bytes, only the reference is
decoded (its norm is still needed for pooled group statistics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from abgate import __version__
from abgate.identity import DEFAULT_CACHE
from abgate.weights.groups import aggregate, by_kind, by_layer
from abgate.weights.metrics import ErrorStats, error_stats, ref_only_stats, same_bytes
from abgate.weights.names import layer_index, tensor_kind
from abgate.weights.readers import Checkpoint, TensorInfo, UnsupportedTensor, open_checkpoint
from abgate.weights.result import STATUSES, TensorDiff
from abgate.weights.tables import outlier_warning

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Progress", "compare", "describe", "diff_checkpoints"]

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
    counts = {status: sum(1 for r in rows if r.status == status) for status in STATUSES}
    tensors = [r.to_json() for r in rows]
    outliers = outlier_warning(tensors)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "abgate_version": __version__,
        "ref": describe(a),
        "other": describe(b),
        "summary": {"n_tensors_ref": len(a.tensors), "n_tensors_other": len(b.tensors),
                    **{f"n_{status}": n for status, n in counts.items()},
                    "overall": aggregate(rows)},
        "groups": {"by_kind": by_kind(rows), "by_layer": by_layer(rows)},
        "tensors": tensors,
        "warnings": _warnings(a, b, counts) + ([outliers] if outliers else []),
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
