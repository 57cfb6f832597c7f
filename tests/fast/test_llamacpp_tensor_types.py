"""llama.cpp's effective configuration reports the weight types of the loaded GGUF
(``tensor_types``), read from its tensor table (the header walk steps over the vocabulary),
and every load asks, so they are read once per file; a file rewritten or replaced since
(another inode, size or modification time) is read again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abgate.engines.llamacpp import weights


def test_types_are_read_once_per_file_and_again_once_it_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []

    def read(path: str) -> dict[str, str]:
        reads.append(path)
        return {"attn_q": f"Q4_1-{len(reads)}"}

    monkeypatch.setattr(weights, "_read_types", read)
    monkeypatch.setattr(weights, "_TYPES", {})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    first = weights.tensor_types(str(model))
    first["attn_q"] = "edited by a caller"  # the cache hands out copies
    assert weights.tensor_types(str(model)) == {"attn_q": "Q4_1-1"}
    assert len(reads) == 1
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert weights.tensor_types(str(model)) == {"attn_q": "Q4_1-2"}
    replaced = tmp_path / "other.gguf"
    replaced.write_bytes(b"GGUF" + bytes(60))
    os.replace(replaced, model)  # another inode at the same path
    assert weights.tensor_types(str(model)) == {"attn_q": "Q4_1-3"}
    assert len(reads) == 3


def test_the_real_types_of_the_embedded_model(model_path: str) -> None:
    pytest.importorskip("gguf")
    types = weights.tensor_types(model_path)
    assert types is not None and types["attn_q"] == "Q4_1" and types["token_embd"] == "Q8_0"
    assert weights.tensor_types(model_path) == types


def test_the_header_walk_names_the_types_gguf_reader_does(model_path: str) -> None:
    """The types from the tensor table (``gguf_file.read_gguf``, 0.04 s) are those of
    every tensor as ``gguf.GGUFReader`` reads the whole file (2.4 s)."""
    pytest.importorskip("gguf")
    tensors = weights.loaded_weights(model_path)
    assert tensors is not None
    roles: dict[str, set[str]] = {}
    for name, t in tensors.items():
        parts = name.split(".")
        roles.setdefault(parts[2] if parts[0] == "blk" else parts[0], set()).add(t.dtype)
    assert weights._read_types(model_path) == {r: ",".join(sorted(t))
                                               for r, t in roles.items()}
