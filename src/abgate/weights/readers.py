"""Read checkpoints one tensor at a time: GGUF files, safetensors files, shard directories.

A :class:`Checkpoint` lists its tensors (name, logical shape, stored dtype) without
reading their data, then hands out one tensor at a time as a float32 array
(:meth:`Checkpoint.load`) or as its stored bytes (:meth:`Checkpoint.raw`). Nothing is
cached, so a caller that drops each array before asking for the next holds one tensor.

GGUF tensors are read through :mod:`abgate.gguf_tensors` (the header walked by
:mod:`abgate.gguf_file`, each tensor's type and exact size checked against ``gguf``'s
table, the data memory-mapped, every non-integer type decoded with
``gguf.quants.dequantize``), as the llama.cpp engine reads the weights it loaded.
safetensors is read with the ``safetensors`` package's numpy API, except BF16, which
numpy cannot represent: those tensors are read from the file's bytes and widened to
float32 (a BF16 value is the top 16 bits of a float32).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from abgate.errors import UsageError
from abgate.gguf_tensors import GGUFTensors
from abgate.safejson import parse

__all__ = ["Checkpoint", "TensorInfo", "UnsupportedTensor", "open_checkpoint"]

F32Array = npt.NDArray[np.float32]
ByteArray = npt.NDArray[np.uint8]

SUFFIXES = (".gguf", ".safetensors")


class UnsupportedTensor(Exception):
    """A tensor whose stored type this reader cannot decode (reported, not fatal)."""


@dataclass(frozen=True)
class TensorInfo:
    """What a checkpoint says about one tensor, before reading it."""

    name: str
    shape: tuple[int, ...]  # logical (row-major, numpy) order for both formats
    dtype: str  # as stored: "Q4_1", "F16", "BF16", "F32", ...
    n_elements: int
    file: Path


@dataclass
class Checkpoint:
    """An opened checkpoint: its tensor table and how to read each tensor."""

    path: Path
    format: str  # "gguf" or "safetensors"
    files: tuple[Path, ...]
    tensors: dict[str, TensorInfo]
    _load: Callable[[str], F32Array]
    _raw: Callable[[str], ByteArray]

    def load(self, name: str) -> F32Array:
        """The tensor ``name`` decoded to a float32 array of its logical shape."""
        info = self.tensors[name]
        try:
            array = self._load(name)
        except (ValueError, TypeError, OSError) as exc:
            raise UsageError(f"{info.file}: cannot read tensor {name!r}: {exc}") from None
        return array.reshape(info.shape)

    def raw(self, name: str) -> ByteArray:
        """The tensor's stored bytes (no decoding), for exact-equality checks."""
        return self._raw(name)


def open_checkpoint(path: Path) -> Checkpoint:
    """Open a ``.gguf`` file, a ``.safetensors`` file or a directory of safetensors shards."""
    if not path.exists():
        raise UsageError(f"checkpoint not found: {path}")
    if path.is_dir():
        shards = sorted(path.glob("*.safetensors"))
        if not shards:
            raise UsageError(f"{path}: directory holds no *.safetensors files")
        return _open_safetensors(path, shards)
    suffix = path.suffix.lower()
    if suffix == ".gguf":
        return _open_gguf(path)
    if suffix == ".safetensors":
        return _open_safetensors(path, [path])
    raise UsageError(f"{path}: unsupported checkpoint format {suffix or '(no extension)'!r} "
                     "(expected .gguf, .safetensors or a directory of .safetensors shards)")


# --- GGUF -------------------------------------------------------------------------------


def _open_gguf(path: Path) -> Checkpoint:
    tensors = GGUFTensors.open(path)  # a one-line UsageError for a bad or unreadable file
    infos = {t.name: TensorInfo(t.name, t.shape, t.qtype.name, math.prod(t.dims), path)
             for t in tensors.table}

    def load(name: str) -> F32Array:
        try:
            return tensors.load(tensors.by_name[name])
        except NotImplementedError:
            raise UnsupportedTensor("gguf cannot dequantize "
                                    f"{tensors.by_name[name].qtype.name}") from None

    return Checkpoint(path, "gguf", (path,), infos,
                      load, lambda name: tensors.raw(tensors.by_name[name]))


# --- safetensors ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the data in the file
    end: int


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and the offset where its data starts."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > 100_000_000:
                raise ValueError(f"header length {size} is implausible")
            header = parse(fh.read(size).decode("utf-8"))
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise UsageError(f"{path}: not a safetensors file (header is not a JSON object)")
    return header, 8 + size


def _entries(path: Path) -> Iterator[tuple[str, _Entry]]:
    """``(name, entry)`` for each tensor in one safetensors file, in header order."""
    header, base = _read_header(path)
    size = path.stat().st_size
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in meta["data_offsets"])
            entry = _Entry(path, str(meta["dtype"]), tuple(int(d) for d in meta["shape"]),
                           base + start, base + end)
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"{path}: malformed header entry for tensor {name!r}") from None
        if not base <= entry.start <= entry.end <= size:
            raise UsageError(f"{path}: tensor {name!r} lies outside the file (truncated?)")
        yield name, entry


def _open_safetensors(path: Path, shards: list[Path]) -> Checkpoint:
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise UsageError(f"{path}: reading safetensors needs the 'safetensors' package "
                         "(pip install 'abgate[weights]')") from None
    entries: dict[str, _Entry] = {}
    for shard in shards:
        for name, entry in _entries(shard):
            if name in entries:
                raise UsageError(f"{shard}: tensor {name!r} is also in {entries[name].file}")
            entries[name] = entry
    tensors = {
        name: TensorInfo(name, e.shape, e.dtype, math.prod(e.shape), e.file)
        for name, e in entries.items()
    }

    def raw(name: str) -> ByteArray:
        e = entries[name]
        if e.end == e.start:
            return np.zeros(0, dtype=np.uint8)
        return np.memmap(e.file, dtype=np.uint8, mode="r", offset=e.start, shape=(e.end - e.start,))

    def load(name: str) -> F32Array:
        e = entries[name]
        if e.dtype == "BF16":
            return _bf16_to_f32(raw(name))
        if e.dtype.startswith("F8") or e.dtype.startswith("F4") or e.dtype.startswith("F6"):
            raise UnsupportedTensor(f"safetensors dtype {e.dtype} is not decoded")
        try:
            with safe_open(str(e.file), framework="np") as fh:
                return np.asarray(fh.get_tensor(name), dtype=np.float32)
        except SafetensorError as exc:
            raise ValueError(str(exc)) from None

    return Checkpoint(path, "safetensors", tuple(shards), tensors, load, raw)


def _bf16_to_f32(data: ByteArray) -> F32Array:
    """Widen little-endian BF16 bytes to float32: shift each 16-bit pattern up 16 bits."""
    halves = np.frombuffer(data, dtype="<u2")
    return (halves.astype(np.uint32) << np.uint32(16)).view(np.float32)
