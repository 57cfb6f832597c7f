"""The one GGUF header reader, on the real SmolLM2 file and on broken copies of it."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from abgate.errors import AbgateError
from abgate.gguf_file import read_gguf


def test_reads_the_header_of_smollm2(model_path: str) -> None:
    header = read_gguf(model_path)
    assert (header.version, header.alignment) == (3, 32)
    assert header.size == Path(model_path).stat().st_size and len(header.tensors) == 272
    embd = header.tensors[0]  # file order
    assert (embd.name, embd.dims, embd.shape) == ("token_embd.weight", (576, 49152),
                                                  (49152, 576))
    assert embd.ggml_type == 8 and embd.n_bytes == 49152 * 576 * 34 // 32  # Q8_0
    assert {t.ggml_type for t in header.tensors} == {0, 3, 8}  # F32, Q4_1, Q8_0
    # The tensors tile the data section: each runs to the next one, the last to the end.
    by_start = sorted(header.tensors, key=lambda t: t.start)
    assert by_start[0].start % header.alignment == 0
    for t, nxt in zip(by_start, by_start[1:], strict=False):
        assert t.start + t.n_bytes == nxt.start
    assert by_start[-1].start + by_start[-1].n_bytes == header.size
    meta = header.metadata
    assert meta["llama.attention.head_count_kv"] == 3 and meta["general.architecture"] == "llama"
    assert meta["tokenizer.ggml.tokens"] is None  # a string array: stepped over


def test_broken_files_are_one_line_errors(model_path: str, tmp_path: Path) -> None:
    data = Path(model_path).read_bytes()
    first_start = read_gguf(model_path).tensors[0].start
    bad = tmp_path / "bad.gguf"
    cases = [(data[:2], "not a GGUF file"), (data[:12], "truncated GGUF file"),
             (data[:first_start - 500], "truncated GGUF file"),  # in the tensor infos
             (data[:first_start + 10], "truncated GGUF file"),  # tensors start past the end
             (b"GGUF" + struct.pack("<I", 7) + data[8:], "GGUF version 7 is not supported"),
             (b"GGUF" + struct.pack(">I", 3) + data[8:], "big-endian")]
    for content, message in cases:
        bad.write_bytes(content)
        with pytest.raises(AbgateError, match=message) as info:
            read_gguf(bad)
        assert str(info.value).startswith(f"{bad}: ") and "\n" not in str(info.value)


def test_needs_no_gguf_package() -> None:
    code = ("import sys, abgate.gguf_file, abgate.bench.roofline; "
            "assert 'gguf' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
