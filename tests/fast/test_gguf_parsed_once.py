"""The transformers engine loads a GGUF inside ``gguf_parsed_once``: transformers' three
parses of the file (config, tokenizer, weights) share one ``gguf.GGUFReader``, its 397
builds of the tensor-name table for SmolLM2 are one, and gguf-py's own attributes are
back when the block ends, also after an error. That the loaded tokenizer and weights are
the same is the engine tier's (tests/test_engine_transformers.py loads the SmolLM2 GGUF)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from abgate.engines.transformers.loading import gguf_parsed_once


def _tiny_gguf(path: Path) -> Path:
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_reader_per_file_one_name_table_and_the_originals_back(tmp_path: Path) -> None:
    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    a, b = _tiny_gguf(tmp_path / "a.gguf"), _tiny_gguf(tmp_path / "b.gguf")
    with gguf_parsed_once():
        first = gguf.GGUFReader(a)
        assert gguf.GGUFReader(str(a)) is first and gguf.GGUFReader(b) is not first
        assert isinstance(first, reader) and "token_embd.weight" in {
            t.name for t in first.tensors}
        table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is table
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not table
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, names)
    with pytest.raises(RuntimeError), gguf_parsed_once():
        raise RuntimeError("a load that fails")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, names)
