"""A GGUF file's tensors, one at a time: the table (:mod:`abgate.gguf_file`'s header
walk, which steps over the vocabulary), each tensor's type and exact size checked against
``gguf``'s table, and its bytes memory-mapped and decoded with ``gguf.quants.dequantize``
(F32, F16, BF16, Q4_0 ... K-quants, IQ types; integer and F64 tensors as numpy holds them).

Read by :mod:`abgate.weights.readers` (a checkpoint on disk) and by the llama.cpp engine
(the weights it loaded: the same file, as stored). ``gguf.GGUFReader`` does the same but
decodes every metadata field first, the whole vocabulary included: 2.4 s for SmolLM2 on
the project's 2-core VM before the first tensor. Needs the ``gguf`` package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from abgate.errors import AbgateError, UsageError
from abgate.gguf_file import read_gguf

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

__all__ = ["GGUFTensor", "GGUFTensors", "read_gguf_tensors"]

F32Array = npt.NDArray[np.float32]
ByteArray = npt.NDArray[np.uint8]

# Types numpy holds natively; everything else goes through gguf.quants.dequantize.
_GGUF_NATIVE = {"F64": "<f8", "I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}


@dataclass(frozen=True)
class GGUFTensor:
    """One GGUF tensor: where its bytes are and how they are stored."""

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


@dataclass(frozen=True)
class GGUFTensors:
    """The tensors of one GGUF file and its bytes, mapped (:meth:`open`)."""

    path: Path
    table: tuple[GGUFTensor, ...]
    by_name: dict[str, GGUFTensor]
    data: ByteArray

    @classmethod
    def open(cls, path: Path) -> GGUFTensors:
        """A missing ``gguf`` package, a bad file or a name given twice: a UsageError."""
        try:
            import gguf  # noqa: F401  (the type table and the decoders)
        except ImportError:
            raise UsageError(f"{path}: reading GGUF needs the 'gguf' package "
                             "(pip install 'abgate[weights]')") from None
        table = tuple(read_gguf_tensors(path))
        by_name: dict[str, GGUFTensor] = {}
        for t in table:
            if by_name.setdefault(t.name, t) is not t:
                raise UsageError(f"{path}: tensor {t.name!r} appears more than once")
        return cls(path, table, by_name, np.memmap(path, dtype=np.uint8, mode="r"))

    def raw(self, t: GGUFTensor) -> ByteArray:
        """The tensor's stored bytes (no decoding)."""
        return self.data[t.start:t.start + t.n_bytes]

    def load(self, t: GGUFTensor) -> F32Array:
        """The tensor decoded to float32: a row per row of the tensor (flat for a native
        type); ``gguf``'s NotImplementedError for a type it cannot decode."""
        from gguf.quants import dequantize

        if t.n_bytes == 0:
            return np.zeros(t.shape, dtype=np.float32)
        native = _GGUF_NATIVE.get(t.qtype.name)
        if native is not None:
            return self.raw(t).view(native).astype(np.float32)
        rows = self.raw(t).reshape(-1, t.n_bytes // max(1, math.prod(t.dims[1:])))
        return np.asarray(dequantize(rows, t.qtype), dtype=np.float32)
