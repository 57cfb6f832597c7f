"""Weights as an engine holds them after load, diffed with the checkpoint diff's one
table model (:func:`diff_loaded`).

An engine's :meth:`~abgate.engines.base.Engine.loaded_weights` (name -> dtype, shape,
a float32 reader) becomes a :class:`~abgate.weights.readers.Checkpoint` of format
``runtime``; the rows, groups and layer x projection table are
:func:`abgate.weights.diff.compare`'s. Each side is identified by what was loaded: the
engine, the model by name (never an absolute path) and its SHA-256, and the effective
configuration's digest, so a report can check a diff belongs to its arms. The document
is :func:`abgate.weights.diff.document`'s, as a checkpoint diff's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from abgate.engines.base import LoadedTensor
from abgate.weights.diff import Progress, compare, document, status_counts
from abgate.weights.readers import Checkpoint, TensorInfo

__all__ = ["diff_loaded", "loaded_checkpoint"]


def loaded_checkpoint(label: str, tensors: Mapping[str, LoadedTensor]) -> Checkpoint:
    """A :class:`Checkpoint` over an engine's loaded tensors (``raw``: the float32 bytes,
    so two sides held identically compare as byte-identical). Each tensor is read from
the engine once: the latest one read is kept until the next is asked for."""
    here = Path(label)
    infos = {name: TensorInfo(name, t.shape, t.dtype, int(np.prod(t.shape)), here)
             for name, t in tensors.items()}

    last: dict[str, Any] = {}  # the latest tensor read: compare asks for raw, then load

    def load(name: str) -> Any:
        if name not in last:
            last.clear()
            last[name] = np.ascontiguousarray(tensors[name].read(), dtype=np.float32)
        return last[name]

    def raw(name: str) -> Any:
        return load(name).view(np.uint8).reshape(-1)

    return Checkpoint(here, "runtime", (), infos, load, raw)


def diff_loaded(ref: Mapping[str, LoadedTensor], other: Mapping[str, LoadedTensor],
                ref_id: Mapping[str, Any], other_id: Mapping[str, Any],
                progress: Progress | None = None) -> dict[str, Any]:
    """The weights diff of ``other`` against ``ref`` as loaded; ``*_id``: each side's
    identity (``engine``, ``model`` (a name), ``sha256``, ``config_digest``, ...)."""
    a = loaded_checkpoint(str(ref_id.get("model", "ref")), ref)
    b = loaded_checkpoint(str(other_id.get("model", "other")), other)
    rows = list(compare(a, b, progress))
    warnings = [f"{n} tensor(s) {s.replace('_', ' ')}" for s, n in status_counts(rows).items()
                if n and s != "compared"]
    return document({"source": "runtime", "ref": _side(ref_id, a), "other": _side(other_id, b)},
                    a, b, rows, warnings)


def _side(identity: Mapping[str, Any], ckpt: Checkpoint) -> dict[str, Any]:
    dtypes = sorted({t.dtype for t in ckpt.tensors.values()})
    return {"path": str(identity.get("model", "")), "format": "runtime",
            "size_bytes": int(identity.get("size_bytes") or 0),
            "sha256": identity.get("sha256"), "files": [],
            "n_tensors": len(ckpt.tensors), "dtypes_loaded": dtypes, **dict(identity)}
