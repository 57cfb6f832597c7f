"""Read checkpoints one tensor at a time: GGUF files, safetensors files, shard directories.

A :class:`Checkpoint` lists its tensors (name, logical shape, stored dtype) without
reading their data, then hands out one tensor at a time as a float32 array
(:meth:`Checkpoint.load`) or as its stored bytes (:meth:`Checkpoint.raw`). Nothing is
cached, so a caller that drops each array before asking for the next holds one tensor.

GGUF headers are read by :mod:`abgate.gguf_file`, each tensor's type and exact size
checked against ``gguf``'s table, and the data memory-mapped; every non-integer type
(F32, F16, BF16, Q4_0 ... K-quants, IQ types) is decoded with ``gguf.quants.dequantize``.
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
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from abgate.errors import AbgateError, UsageError
from abgate.gguf_file import read_gguf
from abgate.safejson import parse

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

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

# Types numpy holds natively; everything else goes through gguf.quants.dequantize.
_GGUF_NATIVE = {"F64": "<f8", "I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}


@dataclass(frozen=True)
class GGUFTensor:
    """One GGUF tensor as this reader decodes it."""

    name: str
    dims: tuple[int, ...]  # GGML order: fastest-varying first (reverse of numpy's order)
    qtype: GGMLQuantizationType
    start: int  # absolute byte offset
    n_bytes: int  # exact, from gguf's GGML_QUANT_SIZES (no alignment padding)

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical numpy (row-major) shape."""
        return tuple(reversed(self.dims))


def read_gguf_tensors(path: Path) -> list[GGUFTensor]:
    """The tensors of the GGUF file at ``path``, in file order (needs ``gguf``)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        header = read_gguf(path)
    except AbgateError as exc:
        raise UsageError(str(exc)) from None
    tensors: list[GGUFTensor] = []
    for t in header.tensors:
        try:
            qtype = GGMLQuantizationType(t.ggml_type)
            block, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise UsageError(f"{path}: tensor {t.name!r} has unknown ggml type "
                             f"{t.ggml_type}") from None
        if t.dims and t.dims[0] % block:
            raise UsageError(f"{path}: tensor {t.name!r}: row of {t.dims[0]} is not a "
                             f"multiple of {block}")
        n_bytes = math.prod(t.dims) // block * type_size
        if t.start + n_bytes > header.size:
            raise UsageError(f"{path}: tensor {t.name!r} runs past the end of the file")
        tensors.append(GGUFTensor(t.name, t.dims, qtype, t.start, n_bytes))
    return tensors


def _open_gguf(path: Path) -> Checkpoint:
    try:
        from gguf.quants import dequantize
    except ImportError:
        raise UsageError(f"{path}: reading GGUF needs the 'gguf' package "
                         "(pip install 'abgate[weights]')") from None
    index = read_gguf_tensors(path)
    by_name: dict[str, GGUFTensor] = {}
    for t in index:
        if by_name.setdefault(t.name, t) is not t:
            raise UsageError(f"{path}: tensor {t.name!r} appears more than once")
    tensors = {t.name: TensorInfo(t.name, t.shape, t.qtype.name, math.prod(t.dims), path)
               for t in index}
    data = np.memmap(path, dtype=np.uint8, mode="r")

    def raw(name: str) -> ByteArray:
        t = by_name[name]
        return data[t.start:t.start + t.n_bytes]

    def load(name: str) -> F32Array:
        t = by_name[name]
        if t.n_bytes == 0:
            return np.zeros(t.shape, dtype=np.float32)
        native = _GGUF_NATIVE.get(t.qtype.name)
        if native is not None:
            return raw(name).view(native).astype(np.float32)
        rows = raw(name).reshape(-1, t.n_bytes // max(1, math.prod(t.dims[1:])))
        try:
            values = dequantize(rows, t.qtype)
        except NotImplementedError:
            raise UnsupportedTensor(f"gguf cannot dequantize {t.qtype.name}") from None
        return np.asarray(values, dtype=np.float32)

    return Checkpoint(path, "gguf", (path,), tensors, load, raw)


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
