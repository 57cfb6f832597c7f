"""llama.cpp's weights as loaded: the tensors of the GGUF file the engine mapped (llama.cpp
runs them as stored), each decoded to float32 by ``gguf.quants.dequantize`` where the
GGUF type allows (:func:`loaded_weights`); a type ``gguf`` cannot decode raises on read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abgate.engines.base import LoadedTensor

__all__ = ["loaded_weights", "tensor_types"]


def loaded_weights(model_path: str) -> dict[str, LoadedTensor] | None:
    """name -> :class:`LoadedTensor`; None without the ``gguf`` package."""
    try:
        import gguf
    except ImportError:
        return None
    reader = gguf.GGUFReader(Path(model_path), "r")
    out: dict[str, LoadedTensor] = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed([int(x) for x in t.shape]))  # numpy order
        out[t.name] = LoadedTensor(t.tensor_type.name, shape, _reader(gguf, t, shape))
    return out


def _reader(gguf: Any, tensor: Any, shape: tuple[int, ...]) -> Any:
    def read() -> Any:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        return data.astype("float32").reshape(shape)
    return read


def tensor_types(model_path: str) -> dict[str, str] | None:
    """The loaded model's weight types by role (``attn_q``, ``ffn_down``, ``token_embd``,
    ...: GGUF names without the block index), several types joined by ``,``; None
    without the ``gguf`` package."""
    tensors = loaded_weights(model_path)
    if tensors is None:
        return None
    roles: dict[str, set[str]] = {}
    for name, t in tensors.items():
        parts = name.split(".")
        role = parts[2] if parts[0] == "blk" and len(parts) > 2 else parts[0]
        roles.setdefault(role, set()).add(t.dtype)
    return {role: ",".join(sorted(types)) for role, types in sorted(roles.items())}
