"""Read a GGUF file's header: version, metadata and the tensor table (no tensor data).

The header is walked once, from the start (GGUF v2 and v3, little-endian)::

    magic            b"GGUF"
    version          u32, 2 or 3
    tensor count     u64
    key/value count  u64
    key/values       key (string), value type (u32), value
    tensor infos     name (string), n_dims (u32), dims (u64 x n_dims, fastest-varying
                     first), ggml type (u32), offset (u64, from the start of the data)
    padding          up to a multiple of ``general.alignment`` (default 32)
    tensor data      to the end of the file

A string is a u64 byte count then UTF-8 bytes. Value types 0-7 and 10-12 are numbers
and bool, 8 is a string, 9 an array (element type u32, count u64, the elements).

Metadata keeps scalars, strings and numeric arrays of up to 4096 elements (per-layer head
counts); longer arrays and string arrays (the tokenizer vocabulary) are stepped over
without being decoded and kept as ``None``, so their keys are still listed.

A tensor's ``n_bytes`` is the distance from its start to the next tensor's start (the
last one runs to the end of the file). That needs no table of quantisation block sizes
and includes alignment padding (under ``alignment`` bytes per tensor); a reader that needs
the exact size derives it from the ggml type (:mod:`abgate.gguf_tensors` uses ``gguf``'s
table).

Only the standard library is used, so the roofline works without the optional ``gguf``
package. Every failure is a one-line :class:`AbgateError` naming the file.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from abgate.errors import AbgateError

__all__ = ["GGUFFile", "GGUFTensorInfo", "read_gguf", "token_texts"]

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# GGUF value type -> one element (8: string and 9: array are handled apart).
_SCALAR = {code: struct.Struct(fmt) for code, fmt in {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d"}.items()}
_STRING, _ARRAY = 8, 9
_MAX_KEPT_ARRAY = 4096
_DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class GGUFTensorInfo:
    """Where one tensor's data lies in the file and how it is stored."""

    name: str
    dims: tuple[int, ...]  # GGML order: fastest-varying first (reverse of numpy's order)
    ggml_type: int  # a GGMLQuantizationType code (0 F32, 1 F16, 3 Q4_1, 8 Q8_0, ...)
    start: int  # absolute byte offset in the file
    n_bytes: int  # to the next tensor's start or the end of the file (padding included)

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical numpy (row-major) shape."""
        return tuple(reversed(self.dims))


@dataclass(frozen=True)
class GGUFFile:
    """A GGUF file's header."""

    path: Path
    version: int
    metadata: dict[str, Any]
    alignment: int
    size: int  # of the whole file, bytes
    tensors: tuple[GGUFTensorInfo, ...]  # in file order


class _Cursor:
    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 4, path

    def error(self, reason: str) -> AbgateError:
        return AbgateError(f"{self.path}: {reason}")

    def take(self, fmt: struct.Struct) -> Any:
        try:
            (value,) = fmt.unpack_from(self.buf, self.pos)
        except struct.error:
            raise self.error("truncated GGUF file") from None
        self.pos += fmt.size
        return value

    def string(self) -> bytes:
        n = self.take(_U64)
        if self.pos + n > len(self.buf):
            raise self.error("truncated GGUF file")
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def value(self, vtype: int, keep: bool = True) -> Any:
        """The value at the cursor (``None`` for what is skipped), moving past it."""
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            text = self.string()
            return text.decode("utf-8", errors="replace") if keep else None
        if vtype != _ARRAY:
            raise self.error(f"unknown GGUF metadata value type {vtype}")
        etype, count = self.take(_U32), self.take(_U64)
        if etype in _SCALAR and keep and count <= _MAX_KEPT_ARRAY:
            return [self.take(_SCALAR[etype]) for _ in range(count)]
        if etype in _SCALAR:
            self.pos += _SCALAR[etype].size * count  # checked by the next read
        elif etype == _STRING:
            self.skip_strings(count)
        else:
            for _ in range(count):
                self.value(etype, keep=False)
        return None

    def skip_strings(self, count: int) -> None:
        """Past ``count`` strings, reading only their lengths (a vocabulary of 49,152
        tokens: 10 ms, where decoding each one took 40)."""
        unpack, buf, pos = _U64.unpack_from, self.buf, self.pos
        try:
            for _ in range(count):
                pos += 8 + unpack(buf, pos)[0]
        except struct.error:
            raise self.error("truncated GGUF file") from None
        self.pos = pos  # past the end: the next read, or read_gguf's check, says so

    def tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        try:
            name = self.string().decode("utf-8")
        except UnicodeDecodeError:
            raise self.error("a tensor name is not valid UTF-8") from None
        dims = tuple(self.take(_U64) for _ in range(self.take(_U32)))
        return name, dims, self.take(_U32), self.take(_U64)


def read_gguf(path: str | Path) -> GGUFFile:
    """The header of the GGUF file at ``path``."""
    path = Path(path)
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise AbgateError(f"{path}: not a GGUF file (no GGUF magic)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, path)
            version = cur.take(_U32)
            if version not in (2, 3):
                hint = " (big-endian files are not supported)" if version > 0xFFFF else ""
                raise cur.error(f"GGUF version {version} is not supported{hint}")
            n_tensors, n_kv = cur.take(_U64), cur.take(_U64)
            metadata: dict[str, Any] = {}
            for _ in range(n_kv):
                key = cur.string().decode("utf-8", errors="replace")
                metadata[key] = cur.value(cur.take(_U32))
            infos = [cur.tensor_info() for _ in range(n_tensors)]
            size = len(buf)
            if cur.pos > size:  # a skipped array ran past the end
                raise cur.error("truncated GGUF file")
    align = metadata.get("general.alignment")
    alignment = align if isinstance(align, int) and align > 0 else _DEFAULT_ALIGNMENT
    data_start = -(-cur.pos // alignment) * alignment
    starts = [data_start + offset for _, _, _, offset in infos]
    for (name, _, _, _), start in zip(infos, starts, strict=True):
        if start > size:
            raise cur.error(f"truncated GGUF file (tensor {name!r} starts past its end)")
    ends = [size] * len(infos)  # each tensor runs to the next start, the last to the end
    for i, j in pairwise(sorted(range(len(infos)), key=starts.__getitem__)):
        ends[i] = starts[j]
    tensors = tuple(GGUFTensorInfo(name, dims, ggml_type, starts[i], ends[i] - starts[i])
                    for i, (name, dims, ggml_type, _) in enumerate(infos))
    return GGUFFile(path, version, metadata, alignment, size, tensors)


def token_texts(path: str | Path, ids: set[int]) -> dict[int, str]:
    """The vocabulary strings of the token IDs ``ids`` (``tokenizer.ggml.tokens``, a
    string array :func:`read_gguf` skips): the BOS/EOS text a chat template renders."""
    path = Path(path)
    found: dict[int, str] = {}
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise AbgateError(f"{path}: not a GGUF file (no GGUF magic)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, path)
            cur.take(_U32)
            _, n_kv = cur.take(_U64), cur.take(_U64)
            for _ in range(n_kv):
                key, vtype = cur.string(), cur.take(_U32)
                if key != b"tokenizer.ggml.tokens" or vtype != _ARRAY:
                    cur.value(vtype, keep=False)
                    continue
                etype, count = cur.take(_U32), cur.take(_U64)
                if etype != _STRING:
                    raise cur.error("tokenizer.ggml.tokens is not a string array")
                for i in range(count):
                    text = cur.string()
                    if i in ids:
                        found[i] = text.decode("utf-8", errors="replace")
                break
    return found
