"""Runtime weights diff: the weights real engines hold after load (issue 37, item 1).

transformers on the CPU: a tiny real Llama loaded at float32 and at bfloat16, diffed
through ``abgate weights-diff --engine``; llama.cpp: SmolLM2's Q4_1 tensors as the engine
exposes them equal ``gguf``'s dequantization of the file, and an A/A diff is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from abgate.ab.runtime_weights import diff_arms, read_arm
from abgate.provenance.contract import check_effective
from abgate.provenance.contract_toml import Contract
from abgate.runner.session import EngineSpec, loaded, prepare_engine
from abgate.weights import open_checkpoint
from tests.conftest import abgate, engine_threads

pytestmark = [pytest.mark.engine, pytest.mark.extras]  # every test here loads a real engine


def _transformers_bf16_arm_against_float32_from_the_loaded_model(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.test_engine_transformers import build_tiny_model

    tiny = build_tiny_model(tmp_path / "llama")
    out = tmp_path / "weights-diff-b.json"
    proc = abgate("weights-diff", "--engine", "transformers", "--model", str(tiny),
                  "--arm-a", "dtype=float32", "--arm-b", "dtype=bfloat16",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["source"] == "runtime"
    assert doc["ref"]["dtypes_loaded"] == ["float32"]
    assert doc["other"]["dtypes_loaded"] == ["bfloat16"]
    assert doc["ref"]["sha256"] == doc["other"]["sha256"] and doc["ref"]["model"] == "llama"
    assert doc["ref"]["config_digest"] != doc["other"]["config_digest"]
    assert str(tmp_path) not in proc.stdout + json.dumps(doc["ref"])  # by name only
    compared = [t for t in doc["tensors"] if t["status"] == "compared"]
    assert compared and doc["summary"]["n_compared"] == len(doc["tensors"])
    assert all(t["rel_l2"] < 2 ** -7 for t in compared)  # bf16 rounding: ~2^-9 relative
    assert all(t["rel_l2"] > 0 for t in compared if t["kind"] in ("attn_q", "ffn_down"))
    assert "Relative L2 per layer and projection" in proc.stdout


def _llamacpp_exposes_its_gguf_tensors_dequantized(model_path: str) -> None:
    p = prepare_engine(EngineSpec("llamacpp", model_path, engine_threads(1)))
    with loaded(p) as session:  # the effective config reports what llama.cpp's API says
        eff = session.described.effective_config
    assert eff["n_seq_max"] == 1 and eff["tensor_types"]["attn_q"] == "Q4_1"
    assert eff["tensor_types"]["token_embd"] == "Q8_0"
    contract = Contract("c.toml", "0" * 64, settings={"ssm_state_dtype": "float32", "n_seq_max": 1})
    (missing,) = check_effective(contract, "llamacpp", eff)
    assert "not reported by this engine" in missing.message()
    held, ident = read_arm(p)
    ckpt = open_checkpoint(Path(model_path))
    assert set(held) == set(ckpt.tensors) and ident["model"] == Path(model_path).name
    name = "blk.0.attn_q.weight"
    assert held[name].dtype == "Q4_1" == ckpt.tensors[name].dtype
    np.testing.assert_array_equal(held[name].read(), ckpt.load(name))
    spec = EngineSpec("llamacpp", model_path, engine_threads(1))
    doc = diff_arms(spec, spec)
    assert doc["summary"]["n_compared"] == len(held)
    assert doc["summary"]["overall"]["max_rel_l2"] == 0.0


@pytest.mark.cost(19)
def test_runtime_weights_of_llamacpp_and_transformers(tmp_path: Path, model_path: str) -> None:
    """llama.cpp's GGUF tensors as loaded, then transformers' float32 and bfloat16 arms
    (skipped there without transformers, after the llama.cpp part has run)."""
    _llamacpp_exposes_its_gguf_tensors_dequantized(model_path)
    _transformers_bf16_arm_against_float32_from_the_loaded_model(tmp_path)
