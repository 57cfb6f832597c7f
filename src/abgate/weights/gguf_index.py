"""A fast tensor index of a GGUF file: names, shapes, types and data offsets.

``gguf.GGUFReader`` turns every metadata value into numpy views, which takes seconds
for a tokenizer vocabulary of tens of thousands of strings (about 5 s for SmolLM2-135M
on a busy 2-core machine). A weights diff needs none of that metadata, so this module
walks the header with ``struct`` and skips the key/value section, keeping only
``general.alignment``. Decoding the tensors is left to ``gguf.quants.dequantize``; the
type table (``GGML_QUANT_SIZES``) also comes from the ``gguf`` package.

Layout (GGUF v2 and v3, little-endian): magic ``GGUF``, version u32, tensor count u64,
key/value count u64, the key/value pairs, one info record per tensor (name, n_dims u32,
dims u64 x n_dims, type u32, offset u64), padding to the alignment, tensor data.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = ["GGUFTensor", "read_index"]

_STRING, _ARRAY, _UINT32 = 8, 9, 4
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_ALIGNMENT_KEY = b"general.alignment"
_DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class GGUFTensor:
    """Where one tensor's data lies in the file and how it is stored."""

    name: str
    dims: tuple[int, ...]  # GGML order: fastest-varying first (reverse of numpy's order)
    qtype: GGMLQuantizationType
    start: int  # absolute byte offset
    n_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical numpy (row-major) shape."""
        return tuple(reversed(self.dims))


class _Cursor:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> bytes:
        n = self.take("<Q")
        data = self.buf[self.pos:self.pos + n]
        if len(data) != n:
            raise ValueError("string runs past the end of the file")
        self.pos += n
        return data

    def skip_value(self, vtype: int) -> None:
        if vtype in _SCALAR_SIZES:
            self.pos += _SCALAR_SIZES[vtype]
        elif vtype == _STRING:
            length = self.take("<Q")  # read first: it moves pos
            self.pos += length
        elif vtype == _ARRAY:
            item, count = self.take("<I"), self.take("<Q")
            if item in _SCALAR_SIZES:
                self.pos += _SCALAR_SIZES[item] * count
            else:
                for _ in range(count):
                    self.skip_value(item)
        else:
            raise ValueError(f"unknown metadata value type {vtype}")


def read_index(path: Path) -> list[GGUFTensor]:
    """The tensors of the GGUF file at ``path``, in file order.

    Raises ValueError (or struct.error) for a file that is not a readable GGUF v2/v3.
    """
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf)
        if buf[:4] != b"GGUF":
            raise ValueError("no GGUF magic")
        cur.pos = 4
        version = cur.take("<I")
        if version not in (2, 3):
            hint = " (big-endian files are not supported)" if version > 0xFFFF else ""
            raise ValueError(f"GGUF version {version} is not supported{hint}")
        n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
        alignment = _DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key, vtype = cur.string(), cur.take("<I")
            if key == _ALIGNMENT_KEY and vtype == _UINT32:
                alignment = cur.take("<I")
            else:
                cur.skip_value(vtype)
        infos = [_tensor_info(cur) for _ in range(n_tensors)]
        data_start = -(-cur.pos // alignment) * alignment
        size = len(buf)
    tensors = [_place(name, dims, qtype, data_start + off) for name, dims, qtype, off in infos]
    for t in tensors:
        if t.start + t.n_bytes > size:
            raise ValueError(f"tensor {t.name!r} runs past the end of the file")
    return tensors


def _tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
    name = cur.string().decode("utf-8")
    n_dims = cur.take("<I")
    dims = tuple(cur.take("<Q") for _ in range(n_dims))
    return name, dims, cur.take("<I"), cur.take("<Q")


def _place(name: str, dims: tuple[int, ...], raw_type: int, start: int) -> GGUFTensor:
    try:
        qtype = GGMLQuantizationType(raw_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise ValueError(f"tensor {name!r} has unknown ggml type {raw_type}") from None
    n_elements = 1
    for d in dims:
        n_elements *= d
    if dims and dims[0] % block:
        raise ValueError(f"tensor {name!r}: row of {dims[0]} is not a multiple of {block}")
    return GGUFTensor(name, dims, qtype, start, n_elements // block * type_size)
