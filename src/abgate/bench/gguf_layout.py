"""A minimal GGUF reader for the roofline: scalar metadata and each tensor's size in bytes.

It follows the GGUF file layout (magic ``GGUF``, version 2 or 3, little-endian): header
counts, metadata key/values, tensor infos (name, dims, type, offset), then the aligned
data section. A tensor's size is the distance from its offset to the next tensor's
(the last one runs to the end of the file), so no table of quantisation block sizes is
needed; alignment padding (under ``general.alignment`` bytes per tensor) is included.
Metadata arrays are skipped except short numeric ones (per-layer head counts); string
arrays such as the vocabulary are stepped over without being decoded.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.errors import AbgateError

# GGUF value types -> struct format of one element (8: string, 9: array are special).
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_KEPT_ARRAY = 4096


@dataclass(frozen=True)
class GGUFLayout:
    metadata: dict[str, Any]
    tensor_bytes: dict[str, int]


class _Cursor:
    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise AbgateError(f"{self.path}: truncated GGUF file") from None
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("<I"), self.unpack("<Q")
            if etype in _SCALAR and count <= _MAX_KEPT_ARRAY:
                return [self.unpack(_SCALAR[etype]) for _ in range(count)]
            for _ in range(count):
                self.skip(etype)
            return None
        if vtype not in _SCALAR:
            raise AbgateError(f"{self.path}: unknown GGUF value type {vtype}")
        return self.unpack(_SCALAR[vtype])

    def skip(self, vtype: int) -> None:
        if vtype == _STRING:
            n = self.unpack("<Q")  # read before adding: unpack moves pos
            self.pos += n
        elif vtype in _SCALAR:
            self.pos += struct.calcsize(_SCALAR[vtype])
        else:
            self.value(vtype)


def read_gguf_layout(path: str | Path) -> GGUFLayout:
    path = Path(path)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, path)
        if buf[:4] != b"GGUF":
            raise AbgateError(f"{path}: not a GGUF file")
        cur.pos = 4
        version = cur.unpack("<I")
        if version not in (2, 3):
            raise AbgateError(f"{path}: GGUF version {version} is not supported")
        n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            metadata[key] = cur.value(cur.unpack("<I"))
        offsets: list[tuple[int, str]] = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("<I")
            cur.pos += 8 * n_dims
            cur.unpack("<I")  # ggml type
            offsets.append((cur.unpack("<Q"), name))
        align = int(metadata.get("general.alignment") or 32)
        data_start = -(-cur.pos // align) * align
        data_len = len(buf) - data_start
    offsets.sort()
    ends = [o for o, _ in offsets[1:]] + [data_len]
    sizes = {name: end - off for (off, name), end in zip(offsets, ends, strict=True)}
    return GGUFLayout(metadata, sizes)
