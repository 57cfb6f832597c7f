"""llama.cpp's weights as loaded: the tensors of the GGUF file the engine mapped (llama.cpp
runs them as stored), each decoded to float32 by ``gguf.quants.dequantize`` where the
GGUF type allows (:func:`loaded_weights`); a type ``gguf`` cannot decode raises on read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from abgate.engines.base import LoadedTensor
from abgate.gguf_file import read_gguf
from abgate.gguf_tensors import GGUFTensor, GGUFTensors

__all__ = ["loaded_weights", "tensor_types"]


def loaded_weights(model_path: str) -> dict[str, LoadedTensor] | None:
    """name -> :class:`LoadedTensor`; None without the ``gguf`` package. The file's
    tensor table through :class:`~abgate.gguf_tensors.GGUFTensors` (``gguf.GGUFReader``
    decoded the whole vocabulary first: 8.7 s of a 25 s weights diff of SmolLM2)."""
    try:
        import gguf  # noqa: F401  (GGUFTensors decodes with it)
    except ImportError:
        return None
    tensors = GGUFTensors.open(Path(model_path))
    return {t.name: LoadedTensor(t.qtype.name, t.shape, _reader(tensors, t))
            for t in tensors.table}


def _reader(tensors: GGUFTensors, t: GGUFTensor) -> Callable[[], Any]:
    def read() -> Any:
        return tensors.load(t).reshape(t.shape)
    return read


# tensor_types per file as it is now (device, inode, size, mtime): every load's effective
# configuration asks again
_TYPES: dict[tuple[int, int, int, int], dict[str, str]] = {}


def tensor_types(model_path: str) -> dict[str, str] | None:
    """The loaded model's weight types by role (``attn_q``, ``ffn_down``, ``token_embd``,
    ...: GGUF names without the block index), several types joined by ``,``; None
    without the ``gguf`` package (its names of the ggml types). Read once per file: a
    file replaced or rewritten (another inode, size or modification time) is read again."""
    st = os.stat(model_path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _TYPES:
        types = _read_types(model_path)
        if types is None:
            return None
        _TYPES[key] = types
    return dict(_TYPES[key])


def _read_types(model_path: str) -> dict[str, str] | None:
    """From the file's tensor table (``gguf_file.read_gguf`` steps over the tokenizer's
    arrays: 0.04 s for SmolLM2 on the 2-core VM, where ``gguf.GGUFReader``, which decodes
    every metadata field, took 2.4 s in every process that loaded a model)."""
    try:
        from gguf import GGMLQuantizationType
    except ImportError:
        return None
    roles: dict[str, set[str]] = {}
    for t in read_gguf(model_path).tensors:
        parts = t.name.split(".")
        role = parts[2] if parts[0] == "blk" and len(parts) > 2 else parts[0]
        roles.setdefault(role, set()).add(_type_name(GGMLQuantizationType, t.ggml_type))
    return {role: ",".join(sorted(types)) for role, types in sorted(roles.items())}


def _type_name(types: Any, code: int) -> str:
    try:
        return str(types(code).name)
    except ValueError:  # a type newer than the installed gguf package
        return f"type{code}"
