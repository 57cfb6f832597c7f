"""A GGUF swapped between two block loads of an A/B (issue 35, item 2): both arms on one
copy of the embedded SmolLM2's GGUF; after arm a's first block the file is changed in
place, its size kept and its mtime put back. The A/B stops at arm b's first load,
``failed``, naming the file and both hashes (not an arm difference).

The check is abgate's (the model's bytes hashed before each load), not the engine's: the
GGUF case runs on the fake engine, which takes any file as its model (the fast tier; it
was llama.cpp in-process, which only paid a load for it); a model directory's weight file
swapped under the transformers engine stays on the real engine (engine tier, extras)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from abgate.ab import phases
from abgate.gguf_file import read_gguf
from tests.support.fake import cli

MIB = 1 << 20


def zero_tensor_data(path: Path) -> None:
    """16 MiB of tensor data zeroed from the first tensor on."""
    start = min(t.start for t in read_gguf(path).tensors)
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(bytes(16 * MIB))


def rename_general_name(path: Path) -> None:
    """The last byte of ``general.name``'s value changed (the header's layout kept)."""
    name = str(read_gguf(path).metadata["general.name"]).encode()
    with open(path, "r+b") as fh:
        head = fh.read(MIB)
        at = head.index(b"general.name") + len(b"general.name") + 4 + 8 + len(name) - 1
        assert head[at - len(name) + 1:at + 1] == name
        fh.seek(at)
        fh.write(b"X" if name[-1:] != b"X" else b"Y")


def sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(MIB):
            h.update(block)
    return h.hexdigest()


def experiment(tmp_path: Path, model: Path, engine_args: str,
               engine: str = "llamacpp") -> Path:
    exp = tmp_path / "swap.toml"
    exp.write_text(f"""name = "swap"
baseline = "a"
[shared]
engine = "{engine}"
model = "{model}"
suite = "synthetic"
difficulty = "trivial"
limit = 4
max_tokens = 16
engine_args = {engine_args}
[schedule]
mode = "blocks"
block_size = 2
warmup = 0
[arms.a]
[arms.b]
[evidence]
agreement = false
probes = false
""")
    return exp


def swapped_ab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exp: Path, file: Path,
               swap: Callable[[Path], None]) -> tuple[dict[str, Any], str]:
    """Run ``exp`` with ``file`` changed by ``swap`` (size and mtime kept) just before
    the second load (arm b's first block); its ``ab.json`` and the file's old SHA-256."""
    before = sha(file)
    loads: list[str] = []
    load = phases.load_arm

    def swapping(state: Any, arm: str, *args: Any, **kwargs: Any) -> Any:
        loads.append(arm)
        if len(loads) == 2:  # arm a's first block is done; b's first load is next
            st = file.stat()
            swap(file)
            os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))
            assert file.stat().st_size == st.st_size
        return load(state, arm, *args, **kwargs)

    monkeypatch.setattr(phases, "load_arm", swapping)
    out = tmp_path / "AB"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert loads == ["a", "b"], loads
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "failed", (ab["status"], ab["error"])
    assert before in ab["error"] and sha(file) in ab["error"], ab["error"]
    assert "undeclared" not in ab["error"] and "b" not in ab["engines"]  # b never loaded
    a = (out / "arms" / "a" / "samples.jsonl").read_text().splitlines()
    assert len(a) == 2  # arm a's first block, on the file the records name
    b = out / "arms" / "b" / "samples.jsonl"
    assert not b.exists() or not b.read_text().strip()
    return ab, before


def test_a_gguf_swapped_between_block_loads_stops_the_ab(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_path: str) -> None:
    """Two swaps, an A/B each: tensor data zeroed, and one byte of the header's
    ``general.name`` changed (the layout kept). On the fake engine, the GGUF its model."""
    for swap in (zero_tensor_data, rename_general_name):
        with monkeypatch.context() as patch:
            d = tmp_path / swap.__name__
            d.mkdir()
            model = d / "model.gguf"
            shutil.copyfile(model_path, model)
            exp = experiment(d, model, "{ n_ctx = 512 }", engine="fake")
            ab, _ = swapped_ab(d, patch, exp, model, swap)
            assert f"arm 'b': model {model} changed before the load" in ab["error"], \
                ab["error"]


def flip_a_weight_byte(path: Path) -> None:
    """One byte of a safetensors file's tensor data changed (past its JSON header)."""
    with open(path, "r+b") as fh:
        header = int.from_bytes(fh.read(8), "little")
        fh.seek(8 + header + 100)
        old = fh.read(1)
        fh.seek(8 + header + 100)
        fh.write(bytes([old[0] ^ 0x55]))


@pytest.mark.engine
@pytest.mark.extras
def test_a_weight_file_of_a_model_directory_swapped_between_loads_stops_the_ab(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers", reason="pip install 'abgate[transformers]'")
    from tests.test_engine_transformers import build_tiny_model

    root = build_tiny_model(tmp_path / "tiny")
    exp = experiment(tmp_path, root, '{ device = "cpu" }', engine="transformers")
    ab, _ = swapped_ab(tmp_path, monkeypatch, exp, root / "model.safetensors",
                       flip_a_weight_byte)
    assert (f"arm 'b': model directory {root}: file model.safetensors changed before the "
            "load") in ab["error"], ab["error"]
