"""Row 3 of issue 37: per-worker precision facts and ``[every_rank]`` contract clauses.

vLLM's worker-side function (:func:`abgate.engines.vllm.worker_facts.worker_facts`) runs
here on torch modules laid out as vLLM's (an ``Attention`` layer with its bound KV
tensor, a ``MambaMixer2`` with ``(conv_state, ssm_state)``, an fp8 linear with its
quantization method) and a config of vLLM's shape; the RPC is a stand-in (vLLM cannot run
here). Real engines: transformers on the CPU reports rank 0's facts; llama.cpp reports
none, and a clause on them says "not reported by this engine".
"""

from __future__ import annotations

import enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from abgate.provenance.contract import check_effective
from abgate.provenance.contract_toml import load_contract

torch = pytest.importorskip("torch")

from abgate.engines.vllm.worker_facts import ranks_entry, worker_facts  # noqa: E402

pytestmark = pytest.mark.extras  # torch/transformers/ray: run in CI's .venv-extras


class CUDAGraphMode(enum.Enum):  # vLLM's enum of this name, as the config holds it
    FULL_AND_PIECEWISE = 3


class Fp8LinearMethod:
    pass


class Attention(torch.nn.Module):
    """As vLLM binds it: 0.26 one KV tensor; older versions a list per virtual engine."""

    def __init__(self, older: bool) -> None:
        super().__init__()
        kv = torch.zeros(2, 4, 8, dtype=torch.bfloat16)
        self.kv_cache = [kv] if older else kv


class MambaMixer2(torch.nn.Module):
    """vLLM's ``MambaBase`` declares its states' dtypes; 0.26 binds ``[conv, ssm]``, older
    versions ``[(conv, ssm)]`` (one entry per virtual engine)."""

    def __init__(self, ssm: Any, older: bool) -> None:
        super().__init__()
        states = [torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(4, 8, dtype=ssm)]
        self.kv_cache = [tuple(states)] if older else states

    def get_state_dtype(self) -> tuple[Any, ...]:
        return tuple(t.dtype for t in (self.kv_cache[0] if isinstance(self.kv_cache[0], tuple)
                                       else self.kv_cache))


class QKVParallelLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(8, 8).to(torch.float8_e4m3fn),
                                         requires_grad=False)
        self.quant_method = Fp8LinearMethod()


def _worker(rank: int, ssm: Any, older: bool = False) -> Any:
    layer0, layer1 = torch.nn.Module(), torch.nn.Module()
    layer0.self_attn = torch.nn.Module()
    layer0.self_attn.attn, layer0.self_attn.qkv_proj = Attention(older), QKVParallelLinear()
    layer1.mixer = MambaMixer2(ssm, older)
    layer1.norm = torch.nn.LayerNorm(8).to(torch.bfloat16)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([layer0, layer1])
    cfg = SimpleNamespace(
        model_config=SimpleNamespace(dtype=torch.bfloat16, quantization="fp8",
                                     enforce_eager=False),
        cache_config=SimpleNamespace(cache_dtype="auto", mamba_ssm_cache_dtype="float32"),
        compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                                           mode=3))
    runner = SimpleNamespace(model=model, vllm_config=cfg)
    return SimpleNamespace(rank=rank, local_rank=rank, model_runner=runner)


class _LLM:
    """``collective_rpc`` as vLLM's: ``fn(worker)`` on every rank, replies in rank order."""

    def __init__(self, workers: list[Any], refuse: bool = False) -> None:
        self.workers, self.refuse = workers, refuse

    def collective_rpc(self, fn: Any, args: tuple[Any, ...] = ()) -> list[Any]:
        if self.refuse:
            raise TypeError("Object of type function is not serializable")
        return [fn(w, *args) for w in self.workers]


@pytest.mark.parametrize("older", [False, True], ids=["vllm-0.26-layout", "older-layout"])
def test_worker_facts_of_a_hybrid_fp8_model(older: bool) -> None:
    facts = worker_facts(_worker(0, torch.float32, older))
    assert facts["rank"] == 0 and facts["model_dtype"] == "bfloat16"
    assert facts["kv_cache_dtype"] == "auto" and facts["mamba_ssm_cache_dtype"] == "float32"
    assert facts["graph_mode"] == "FULL_AND_PIECEWISE" and facts["quantization"] == "fp8"
    assert facts["ssm_state_dtype"] == "float32" and facts["conv_state_dtype"] == "bfloat16"
    assert facts["kv_cache_tensor_dtype"] == "bfloat16"
    assert facts["state_dtypes_by_layer"]["layers.1.mixer"] == {
        "conv_state": "bfloat16", "ssm_state": "float32"}
    assert facts["quantization_by_module"] == {"QKVParallelLinear": "Fp8LinearMethod"}
    assert facts["weight_dtypes"] == {"bfloat16": 2, "float8_e4m3fn": 1}


def _every_rank(tmp_path: Path, body: str) -> Any:
    path = tmp_path / "c.toml"
    path.write_text(f"[every_rank]\n{body}\n")
    return load_contract(path)


def test_every_rank_clause_names_the_rank_that_breaks_it(tmp_path: Path) -> None:
    eff = ranks_entry(_LLM([_worker(0, torch.float32), _worker(1, torch.float16)]))
    assert [r["rank"] for r in eff["ranks"]] == [0, 1]
    contract = _every_rank(tmp_path, 'ssm_state_dtype = "float32"\ngraph_mode = '
                                     '"FULL_AND_PIECEWISE"\nmodel_dtype = "bfloat16"')
    (bad,) = check_effective(contract, "vllm", eff)
    assert bad.clause == "every_rank.ssm_state_dtype (rank 1)" and bad.actual == "float16"
    assert contract.to_dict()["every_rank"]["ssm_state_dtype"] == "float32"
    refused = ranks_entry(_LLM([_worker(0, torch.float32)], refuse=True))
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION=1" in refused["ranks_not_reported"]
    (unknown,) = check_effective(contract := _every_rank(tmp_path, 'ssm_state_dtype = '
                                                         '"float32"'), "vllm", refused)
    assert "not reported by this engine" in unknown.message() and contract.every_rank
    (absent,) = check_effective(_every_rank(tmp_path, "n_seq_max = 1"), "vllm", eff | {
        "ranks": eff["ranks"][:1]})
    assert "not reported by this engine (rank 0 of vllm" in absent.message()


@pytest.mark.engine
def test_transformers_reports_rank_facts_and_llamacpp_reports_none(
        tmp_path: Path, model_path: str) -> None:
    pytest.importorskip("transformers")
    from abgate.runner.session import EngineSpec, loaded, prepare_engine
    from tests.conftest import engine_threads
    from tests.test_engine_transformers import build_tiny_model

    tiny = build_tiny_model(tmp_path / "llama")
    with loaded(prepare_engine(EngineSpec("transformers", str(tiny),
                                          {"dtype": "bfloat16"}))) as session:
        eff = session.described.effective_config
        n_params = len(list(session.engine._model.parameters()))
    (rank0,) = eff["ranks"]
    assert rank0["rank"] == 0 and rank0["weight_dtypes"] == {"bfloat16": n_params}
    contract = _every_rank(tmp_path, 'ssm_state_dtype = "float32"')
    (unknown,) = check_effective(contract, "transformers", eff)
    assert "not reported by this engine (rank 0 of transformers" in unknown.message()
    with loaded(prepare_engine(EngineSpec("llamacpp", model_path,
                                          engine_threads(1)))) as session:
        eff = session.described.effective_config
    (none,) = check_effective(contract, "llamacpp", eff)
    assert "not reported by this engine (llamacpp: no per-rank facts)" in none.message()
