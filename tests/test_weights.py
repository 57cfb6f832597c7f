"""``abgate weights-diff``: readers, metrics, name grouping, the real SmolLM2 GGUF, CLI."""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import abgate.cli.weights_cmd  # noqa: F401  (registers the command)
from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.weights import diff_checkpoints, error_stats, layer_index, open_checkpoint, tensor_kind

gguf = pytest.importorskip("gguf")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

Q = gguf.GGMLQuantizationType
PICKED = ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_down.weight",
          "blk.0.attn_norm.weight")
runner = CliRunner()


# --- helpers ----------------------------------------------------------------------------


def _write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, Any]]) -> Path:
    """A GGUF holding only ``tensors``: name -> (array, ggml type or None for native)."""
    writer = gguf.GGUFWriter(path, arch="llama")
    for name, (array, qtype) in tensors.items():
        writer.add_tensor(name, array, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in result["tensors"]}


def _with_noise(x: np.ndarray, rel: float, seed: int) -> np.ndarray:
    """``x`` plus Gaussian noise whose L2 norm is exactly ``rel`` * ||x||."""
    noise = np.random.default_rng(seed).standard_normal(x.shape)
    noise *= rel * np.linalg.norm(x) / np.linalg.norm(noise)
    return (x + noise).astype(np.float32)


def _bf16_safetensors(path: Path, name: str, values: np.ndarray) -> None:
    """safetensors.numpy cannot write BF16: build the file by hand (top half of float32)."""
    raw = (values.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps({name: {"dtype": "BF16", "shape": list(values.shape),
                                "data_offsets": [0, len(raw)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + raw)


# --- the real SmolLM2 GGUF --------------------------------------------------------------


@pytest.fixture(scope="module")
def smol(model_path: str) -> Path:
    return Path(model_path)


@pytest.fixture(scope="module")
def picked(smol: Path) -> dict[str, np.ndarray]:
    ckpt = open_checkpoint(smol)
    return {name: ckpt.load(name) for name in PICKED}


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory, picked: dict[str, np.ndarray]
             ) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gguf")
    f32 = {n: (x, None) for n, x in picked.items()}
    q8 = {n: (gguf.quants.quantize(x, Q.Q8_0), Q.Q8_0) if x.ndim == 2 else (x, None)
          for n, x in picked.items()}
    noisy = {n: (_with_noise(x, 1e-2, seed=i), None) for i, (n, x) in enumerate(picked.items())}
    broken = {
        "blk.0.attn_q.weight": (picked["blk.0.attn_q.weight"], None),
        "blk.0.ffn_down.weight": (np.ascontiguousarray(picked["blk.0.ffn_down.weight"].T), None),
        "blk.0.attn_norm.weight": (picked["blk.0.attn_norm.weight"], None),
        "extra.weight": (np.ones((4, 32), np.float32), None),
    }
    return {"f32": _write_gguf(d / "f32.gguf", f32), "q8": _write_gguf(d / "q8.gguf", q8),
            "noisy": _write_gguf(d / "noisy.gguf", noisy),
            "broken": _write_gguf(d / "broken.gguf", broken)}


def test_smollm2_against_itself_is_exact(smol: Path, smollm2_self_diff: dict[str, Any]
                                         ) -> None:
    result = smollm2_self_diff  # diff_checkpoints(smol, smol), shared with test_report.py
    assert result["schema_version"] == 1
    assert result["summary"]["n_compared"] == result["summary"]["n_tensors_ref"] == 272
    assert all(r["rel_l2"] == 0.0 and r["sqnr_db"] == "inf" for r in result["tensors"])
    assert result["summary"]["overall"]["min_sqnr_db"] == "inf"
    assert result["ref"]["sha256"] == result["other"]["sha256"]
    assert result["ref"]["size_bytes"] == smol.stat().st_size
    kinds = {g["kind"]: g["n_tensors"] for g in result["groups"]["by_kind"]}
    assert kinds == {"embeddings": 1, "attn_q": 30, "attn_k": 30, "attn_v": 30,
                     "attn_output": 30, "ffn_gate": 30, "ffn_up": 30, "ffn_down": 30,
                     "norm": 61}
    layers = [g["layer"] for g in result["groups"]["by_layer"]]
    assert layers == [*range(30), None]
    json.dumps(result, allow_nan=False)  # strict JSON


def test_f32_copy_of_dequantized_values_is_exact(smol: Path, variants: dict[str, Path]) -> None:
    result = diff_checkpoints(smol, variants["f32"])
    rows = _rows(result)
    for name in PICKED:
        assert rows[name]["status"] == "compared" and rows[name]["dtype_other"] == "F32"
        assert rows[name]["rel_l2"] == 0.0 and rows[name]["sqnr_db"] == "inf"
        assert not rows[name]["byte_identical"] or rows[name]["dtype_ref"] == "F32"
    assert rows["blk.0.attn_q.weight"]["dtype_ref"] == "Q4_1"
    assert result["summary"]["n_missing_in_other"] == 272 - len(PICKED)


def test_q8_0_requantization_is_close(smol: Path, variants: dict[str, Path]) -> None:
    rows = _rows(diff_checkpoints(smol, variants["q8"]))
    for name in PICKED[:3]:
        row = rows[name]
        assert row["dtype_other"] == "Q8_0"
        assert 30.0 < row["sqnr_db"] < 50.0, (name, row["sqnr_db"])
        assert 0.0 < row["rel_l2"] < 0.03
        assert math.isclose(row["sqnr_db"], -20 * math.log10(row["rel_l2"]), rel_tol=1e-9)


def test_known_noise_gives_known_error(smol: Path, variants: dict[str, Path]) -> None:
    result = diff_checkpoints(smol, variants["noisy"])
    for name in PICKED:
        row = _rows(result)[name]
        assert row["rel_l2"] == pytest.approx(1e-2, rel=0.1)
        assert row["sqnr_db"] == pytest.approx(40.0, abs=1.0)
    groups = {g["kind"]: g for g in result["groups"]["by_kind"]}
    assert groups["attn_q"]["pooled_rel_l2"] == pytest.approx(1e-2, rel=0.1)
    assert groups["norm"]["n_tensors"] == 1


def test_missing_and_reshaped_tensors_are_listed(smol: Path, variants: dict[str, Path]) -> None:
    result = diff_checkpoints(smol, variants["broken"])
    rows = _rows(result)
    assert rows["blk.0.attn_k.weight"]["status"] == "missing_in_other"
    assert rows["extra.weight"]["status"] == "missing_in_ref"
    down = rows["blk.0.ffn_down.weight"]
    assert down["status"] == "shape_mismatch" and down["rel_l2"] is None
    assert down["shape_ref"] == [576, 1536] and down["shape_other"] == [1536, 576]
    assert rows["blk.0.attn_q.weight"]["rel_l2"] == 0.0
    assert result["summary"]["n_shape_mismatch"] == 1
    assert any("shape mismatch" in w for w in result["warnings"])


def test_gguf_index_and_values_match_gguf_reader(variants: dict[str, Path]) -> None:
    """The table and every decoded tensor (the checkpoint reader's and the llama.cpp
    engine's loaded weights) against ``gguf.GGUFReader`` and ``gguf``'s dequantization."""
    from abgate.engines.llamacpp.weights import loaded_weights
    from abgate.gguf_tensors import GGUFTensors, read_gguf_tensors

    for path in variants.values():
        ours = [(t.name, t.start, t.n_bytes, t.qtype) for t in read_gguf_tensors(path)]
        reader = gguf.GGUFReader(path)
        theirs = [(t.name, t.data_offset, t.n_bytes, t.tensor_type) for t in reader.tensors]
        assert ours == theirs
        mapped, held = GGUFTensors.open(path), loaded_weights(str(path))
        assert held is not None and set(held) == set(mapped.by_name)
        for t in reader.tensors:
            shape = tuple(int(d) for d in reversed([int(x) for x in t.shape]))
            decoded = gguf.quants.dequantize(t.data, t.tensor_type)
            expected = decoded.astype(np.float32).reshape(shape)
            np.testing.assert_array_equal(held[t.name].read(), expected)
            np.testing.assert_array_equal(
                mapped.load(mapped.by_name[t.name]).reshape(shape), expected)


# --- safetensors ------------------------------------------------------------------------

HF_REL = {"q_proj": 1e-2, "down_proj": 1e-1}


def _hf_model(rng: np.random.Generator) -> dict[str, np.ndarray]:
    t = {"model.embed_tokens.weight": rng.standard_normal((64, 16)),
         "model.norm.weight": rng.standard_normal(16),
         "lm_head.weight": rng.standard_normal((64, 16))}
    for i in range(2):
        p = f"model.layers.{i}."
        t |= {p + f"self_attn.{x}_proj.weight": rng.standard_normal((16, 16)) for x in "qkvo"}
        t |= {p + "mlp.gate_proj.weight": rng.standard_normal((32, 16)),
              p + "mlp.up_proj.weight": rng.standard_normal((32, 16)),
              p + "mlp.down_proj.weight": rng.standard_normal((16, 32)),
              p + "input_layernorm.weight": rng.standard_normal(16),
              p + "post_attention_layernorm.weight": rng.standard_normal(16)}
    return {k: v.astype(np.float32) for k, v in t.items()}


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("st")
    ref = _hf_model(np.random.default_rng(0))
    other = {}
    for i, (name, x) in enumerate(ref.items()):
        rel = next((r for key, r in HF_REL.items() if key in name), 0.0)
        other[name] = _with_noise(x, rel, seed=i) if rel else x.astype(np.float16)
    safetensors_numpy.save_file(ref, d / "ref.safetensors")
    safetensors_numpy.save_file(other, d / "other.safetensors")
    return d / "ref.safetensors", d / "other.safetensors"


def test_safetensors_groups_by_layer_and_kind(hf_pair: tuple[Path, Path]) -> None:
    result = diff_checkpoints(*hf_pair)
    assert result["summary"]["n_compared"] == 21 and not result["warnings"]
    kinds = {g["kind"]: g for g in result["groups"]["by_kind"]}
    assert set(kinds) == {"embeddings", "attn_q", "attn_k", "attn_v", "attn_output",
                          "ffn_gate", "ffn_up", "ffn_down", "norm", "output"}
    assert kinds["attn_q"]["max_rel_l2"] == pytest.approx(1e-2, rel=1e-3)
    assert kinds["ffn_down"]["mean_rel_l2"] == pytest.approx(1e-1, rel=1e-3)
    assert kinds["ffn_down"]["min_sqnr_db"] == pytest.approx(20.0, abs=0.01)
    assert 0 < kinds["attn_k"]["max_rel_l2"] < 1e-3  # float16 rounding only
    assert kinds["norm"]["n_tensors"] == 5
    layers = {g["layer"]: g for g in result["groups"]["by_layer"]}
    assert set(layers) == {0, 1, None} and layers[None]["n_tensors"] == 3
    assert layers[0]["max_rel_l2"] == pytest.approx(1e-1, rel=1e-3)
    assert layers[None]["max_rel_l2"] < 1e-3


def test_shard_directory_and_bf16(tmp_path: Path) -> None:
    x = np.array([[1.0, -2.5, 0.15625, 0.0], [3.0, -0.5, 1024.0, 7.0]], np.float32)
    y = np.arange(6, dtype=np.float32)
    safetensors_numpy.save_file({"a.weight": x, "b.weight": y}, tmp_path / "ref.safetensors")
    shards = tmp_path / "shards"
    shards.mkdir()
    _bf16_safetensors(shards / "model-00001-of-00002.safetensors", "a.weight", x)
    safetensors_numpy.save_file({"b.weight": y}, shards / "model-00002-of-00002.safetensors")
    result = diff_checkpoints(tmp_path / "ref.safetensors", shards)
    rows = _rows(result)
    assert rows["a.weight"]["dtype_other"] == "BF16" and rows["a.weight"]["rel_l2"] == 0.0
    assert rows["b.weight"]["byte_identical"] is True
    assert result["other"]["sha256"] is None and len(result["other"]["files"]) == 2
    safetensors_numpy.save_file({"b.weight": y}, shards / "dup.safetensors")
    with pytest.raises(UsageError, match="'b.weight' is also in"):
        open_checkpoint(shards)


# --- names and metrics ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "layer", "kind"), [
    ("token_embd.weight", None, "embeddings"),
    ("model.embed_tokens.weight", None, "embeddings"),
    ("blk.12.attn_q.weight", 12, "attn_q"),
    ("model.layers.12.self_attn.q_proj.weight", 12, "attn_q"),
    ("model.layers.3.self_attn.o_proj.weight", 3, "attn_output"),
    ("blk.3.attn_output.weight", 3, "attn_output"),
    ("blk.0.attn_q_norm.weight", 0, "norm"),
    ("model.layers.0.post_attention_layernorm.weight", 0, "norm"),
    ("output_norm.weight", None, "norm"),
    ("model.norm.weight", None, "norm"),
    ("output.weight", None, "output"),
    ("lm_head.weight", None, "output"),
    ("blk.5.ffn_gate_exps.weight", 5, "ffn_gate"),
    ("blk.5.ffn_gate_inp.weight", 5, "ffn_router"),
    ("model.layers.5.mlp.gate.weight", 5, "ffn_router"),
    ("model.layers.5.mlp.experts.7.down_proj.weight", 5, "ffn_down"),
    ("model.layers.1.block_sparse_moe.experts.0.w3.weight", 1, "ffn_up"),
    ("transformer.h.2.attn.c_attn.weight", 2, "attn_qkv"),
    ("transformer.h.2.mlp.c_proj.weight", 2, "ffn_down"),
    ("transformer.h.2.attn.c_proj.weight", 2, "attn_output"),
    ("rope_freqs.weight", None, "other"),
])
def test_name_vocabulary(name: str, layer: int | None, kind: str) -> None:
    assert layer_index(name) == layer
    assert tensor_kind(name) == kind


def test_error_stats_chunking_and_edge_cases() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(10_001).astype(np.float32)
    b = (a + 0.1 * rng.standard_normal(a.size)).astype(np.float32)
    whole, chunked = error_stats(a, b), error_stats(a, b, chunk=997)
    exact = np.linalg.norm(b.astype(np.float64) - a) / np.linalg.norm(a.astype(np.float64))
    assert chunked.rel_l2 == pytest.approx(exact, rel=1e-12)
    assert whole.rel_l2 == pytest.approx(chunked.rel_l2, rel=1e-12)
    assert chunked.sqnr_db == pytest.approx(-20 * math.log10(exact), rel=1e-12)
    zero = np.zeros(4, np.float32)
    assert error_stats(zero, zero).rel_l2 == 0.0 and error_stats(zero, zero).sqnr_db == math.inf
    assert error_stats(zero, zero + 1).rel_l2 == math.inf
    assert error_stats(zero, zero + 1).cosine is None


# --- CLI --------------------------------------------------------------------------------


def test_cli_prints_tables_and_writes_json(hf_pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "wd.json"
    result = runner.invoke(app, ["weights-diff", *map(str, hf_pair), "--json", str(out),
                                 "--top", "3"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for text in ("By kind", "By layer", "Worst 3 of 21", "attn_q", "ffn_down", "20.0"):
        assert text in result.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "abgate.weights_diff" and doc["schema_version"] == 1
    assert len(doc["ref"]["sha256"]) == 64 and doc["other"]["size_bytes"] > 0
    assert len(doc["tensors"]) == 21


def test_cli_json_never_written_through_a_link(hf_pair: tuple[Path, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``--json`` at a symbolic link: one line, before any checkpoint is read, and the
    link's target untouched (the weights diff's one writer never writes through one)."""
    from abgate.cli import weights_cmd
    from tests.support.fake import cli

    target, link = tmp_path / "elsewhere.json", tmp_path / "wd.json"
    target.write_text("keep\n")
    link.symlink_to(target)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the diff ran before the bad path was refused")

    monkeypatch.setattr(weights_cmd, "diff_checkpoints", never)
    r = cli("weights-diff", *map(str, hf_pair), "--json", str(link))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("abgate: error: ") and "symbolic link" in r.stderr
    assert target.read_text() == "keep\n" and link.is_symlink()


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "nope.gguf", "checkpoint not found:"),
    (lambda d: d / "model.bin", "unsupported checkpoint format '.bin'"),
    (lambda d: d / "fake.gguf", "no GGUF magic"),
])
def test_cli_bad_input_is_one_line_exit_2(make: Any, message: str, tmp_path: Path,
                                          hf_pair: tuple[Path, Path],
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from abgate.cli import main

    (tmp_path / "model.bin").write_bytes(b"\0" * 16)
    (tmp_path / "fake.gguf").write_bytes(b"NOPE" + b"\0" * 16)
    bad = make(tmp_path)
    monkeypatch.setattr(sys, "argv", ["abgate", "weights-diff", str(hf_pair[0]), str(bad)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("abgate: error: ") and message in err and str(bad) in err
    assert err.count("\n") == 1


def test_reviewer_tables_layer_by_projection_and_kind_ranges(hf_pair: tuple[Path, Path],
                                                             tmp_path: Path) -> None:
    """The layer x projection table and min-max per kind, in the CLI and in the A/B
    report (SQNR rounded there)."""
    from abgate.report import render
    from abgate.weights.tables import kind_ranges, layer_projection_table
    from tests.support.report import build_ab_dir

    result = diff_checkpoints(*hf_pair)
    kinds, rows = layer_projection_table(result["tensors"])
    assert kinds == ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                     "ffn_down"]
    assert [layer for layer, _ in rows] == [0, 1]
    assert rows[0][1]["ffn_down"] == pytest.approx(1e-1, rel=1e-3)
    ranges = {k: (n, low, high) for k, n, low, high in kind_ranges(result["tensors"])}
    assert ranges["norm"][0] == 5 and ranges["attn_q"][2] == pytest.approx(1e-2, rel=1e-3)
    assert ranges["attn_k"][2] < 1e-3  # float16 rounding only
    cli = runner.invoke(app, ["weights-diff", *map(str, hf_pair)], env={"COLUMNS": "200"})
    assert cli.exit_code == 0, cli.output
    assert "Relative L2 per layer and projection" in cli.output
    assert "Relative L2 range per kind" in cli.output
    ab = build_ab_dir(tmp_path / "ab")
    arm_sha = json.loads((ab / "arms" / "base" / "run.json").read_text())["spec"]["model"]
    for side in ("ref", "other"):  # the diff is about the arms' model: the report shows it
        result[side] = {**result[side], "sha256": arm_sha["sha256"]}
    (ab / "weights-diff-fast.json").write_text(json.dumps(result))
    md = render(ab, "md")
    assert "| Layer | `attn_q` | `attn_k` | `attn_v` | `attn_output` |" in md
    assert "| `ffn_down` | 2 | 0.1 | 0.1 |" in md
    sqnr = f"{result['summary']['overall']['pooled_sqnr_db']:.1f} dB"
    assert f"pooled SQNR {sqnr}" in md
    assert str(result["summary"]["overall"]["pooled_sqnr_db"]) not in md  # rounded
