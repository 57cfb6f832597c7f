"""The bench library on the real engine (SmolLM2-135M), at small sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from abgate.bench import (
    BenchCase,
    context_length,
    fixed_length_prompt,
    plan_bench,
    prompt_sha256,
    run_bench,
)
from abgate.bench.fidelity import fidelity
from abgate.bench.prompts import parse_input_lens, parse_shas
from abgate.bench.run import bench_request, resolve_cases
from abgate.bench.samples import BenchSample
from abgate.engines.base import GenerationResult
from abgate.engines.llamacpp import engine as llamacpp
from abgate.errors import UsageError
from abgate.metrics import request_timing
from abgate.records.samples import ids_sha256
from tests.conftest import HANG_S, engine_threads

# One thread unless ABGATE_TEST_THREADS says otherwise: quick on a busy 2-core machine.
THREADS = engine_threads(default=1)


@pytest.fixture(scope="module")
def engine(model_path: str) -> Iterator[llamacpp.LlamaCppEngine]:
    e = llamacpp.load(model_path, {"n_ctx": 256, **THREADS})
    yield e
    e.close()


def _prompts_have_exact_lengths_and_stable_shas(engine: llamacpp.LlamaCppEngine) -> None:
    for n in (1, 64, 200):
        ids = fixed_length_prompt(engine.tokenize, n)
        assert len(ids) == n and ids == fixed_length_prompt(engine.tokenize, n)
    a = fixed_length_prompt(engine.tokenize, 64)
    assert prompt_sha256(a) == ids_sha256(a)
    assert prompt_sha256(a) != prompt_sha256(fixed_length_prompt(engine.tokenize, 64, seed=1))
    text = " ".join(f"{engine.detokenize(a)}".split())
    assert text.split()[0][0].isupper() and "." in text  # reads like prose


def _prompt_sha_is_the_same_in_another_process(engine: llamacpp.LlamaCppEngine,
                                                   model_path: str) -> None:
    code = ("from abgate.engines.llamacpp import engine as llamacpp; from abgate.bench import *;"
            f"e = llamacpp.load({model_path!r}, {{'n_ctx': 256, **{THREADS!r}}});"
            "print(prompt_sha256(fixed_length_prompt(e.tokenize, 64)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=HANG_S, check=True).stdout.strip().splitlines()[-1]
    assert out == prompt_sha256(fixed_length_prompt(engine.tokenize, 64))


def _run_bench_returns_json_results(engine: llamacpp.LlamaCppEngine) -> None:
    seen: list[BenchSample] = []
    res = run_bench(engine, [BenchCase(64, 16)], warmup=1, repeats=2, on_sample=seen.append)
    doc = json.loads(json.dumps(res.to_dict()))
    assert doc["n_ctx"] == 256 and len(doc["cases"]) == 1
    case = doc["cases"][0]
    assert case["prompt_tokens"] == 64 and len(case["prompt_sha256"]) == 64
    assert len(case["output_token_ids"]) == 16
    assert case["output_sha256"] == ids_sha256(case["output_token_ids"])
    assert case["outputs_identical"] is True and case["warmup_identical"] is True
    assert [s["warmup"] for s in case["samples"]] == [True, False, False] == [
        s.warmup for s in seen]
    assert case["samples"] == [s.to_dict() for s in seen]
    assert case["n"] == 2 and case["n_warmup"] == 1
    speed = case["speed"]
    for key in ("ttft_s", "prefill_tps", "steady_decode_tps", "tpot_ms", "e2e_s", "output_tps"):
        assert speed[key]["n"] == 2 and speed[key]["median"] > 0
    fid = case["fidelity"]
    # Our per-token clock spans llama.cpp's own decode time plus the loop around it, so
    # the ratio cannot exceed 1 (beyond clock jitter); how far below 1 it lies is this
    # CPU's speed against Python's overhead, not a property of abgate.
    assert fid["engine_decode_tps"]["n"] == 2 and 0 < fid["decode_ratio"]["median"] < 1.05
    assert case["counts_match"] is True
    s = case["samples"][1]
    assert s["engine_timings"]["eval_tokens"] == 15
    assert s["engine_timings"]["prompt_eval_tokens"] == 64
    assert s["prompt"]["sha256"] == case["prompt_sha256"] and len(s["token_times_ms"]) == 16


def _context_boundary(engine: llamacpp.LlamaCppEngine) -> None:
    n_ctx = context_length(engine)
    assert n_ctx == 256
    assert resolve_cases([BenchCase(None, 16)], n_ctx) == [BenchCase(240, 16)]
    assert resolve_cases([BenchCase(240, 16)], n_ctx) == [BenchCase(240, 16)]
    with pytest.raises(UsageError, match=r"n_ctx=256.*largest input is 240"):
        plan_bench(engine, [BenchCase(241, 16)])
    # one output token (the n_ctx - 1 + 1 boundary) is a case; none is refused
    assert resolve_cases([BenchCase(None, 1)], n_ctx) == [BenchCase(255, 1)]
    with pytest.raises(UsageError, match="output-len"):
        resolve_cases([BenchCase(8, 0)], n_ctx)


def _max_fills_the_context(engine: llamacpp.LlamaCppEngine) -> None:
    res = run_bench(engine, [BenchCase(None, 8)], warmup=0, repeats=1)
    case = res.to_dict()["cases"][0]
    assert case["input_len"] == 248 and case["samples"][0]["output"]["tokens"] == 8


def test_option_parsing() -> None:
    assert parse_input_lens("512, 2048,max") == [512, 2048, None]
    for bad in ("", "0", "12k", "512,,1"):
        with pytest.raises(UsageError):
            parse_input_lens(bad)
    assert parse_shas("A" * 64) == ["a" * 64]
    with pytest.raises(UsageError):
        parse_shas("abc")


def _result(n_out: int, t_first: float, t_last: float, et: dict[str, float]) -> GenerationResult:
    return GenerationResult(request_id="r", text="", finish_reason="length", prompt_tokens=100,
                            output_tokens=n_out, output_token_ids=list(range(n_out)),
                            t_submit=0.0, t_first_token=t_first, t_last_token=t_last,
                            engine_timings=et)


def test_fidelity_arithmetic() -> None:
    # 11 tokens: 10 intervals over 0.1 s -> 100 tok/s; engine 10 evals in 99 ms.
    r = _result(11, 0.05, 0.15, {"prompt_eval_ms": 40.0, "prompt_eval_tokens": 100,
                                 "eval_ms": 99.0, "eval_tokens": 10})
    f = fidelity(r, request_timing(r))
    assert f.engine_decode_tps == pytest.approx(1000 / 9.9)
    assert f.decode_ratio == pytest.approx(0.99)
    assert f.overhead_us_per_token == pytest.approx(100.0)
    assert f.engine_prefill_tps == pytest.approx(2500.0)
    assert f.prefill_ratio == pytest.approx(2000 / 2500)
    assert f.counts_match is True
    none = fidelity(_result(11, 0.05, 0.15, {}), request_timing(r))
    assert none.decode_ratio is None and none.counts_match is None


def _greedy_fast_path_matches_the_sampler_chain(engine: llamacpp.LlamaCppEngine,
                                                     model_path: str) -> None:
    """The engine's argmax greedy loop picks the tokens llama-cpp-python's greedy sampler
    picks (prefix_cache=true still decodes through ``Llama.generate``)."""
    ids = tuple(fixed_length_prompt(engine.tokenize, 100, seed=3))
    req = bench_request("g", ids, 48)
    chain = llamacpp.load(model_path, {"n_ctx": 256, **THREADS, "prefix_cache": True})
    try:
        slow = chain.generate([req])[0]
    finally:
        chain.close()
    fast = engine.generate([req])[0]
    assert fast.output_token_ids == slow.output_token_ids and fast.output_tokens == 48
    assert fast.engine_timings["eval_tokens"] == slow.engine_timings["eval_tokens"] == 47


# -- the tests: each several checks on the module's one engine -------------------------------


@pytest.mark.engine
def test_prompts_and_the_context_on_the_real_tokenizer(engine: llamacpp.LlamaCppEngine,
                                                       model_path: str) -> None:
    """Fixed-length prompts: exact lengths, stable SHAs (in another process too), prose;
    the context boundary, and ``max`` filling it."""
    _prompts_have_exact_lengths_and_stable_shas(engine)
    _prompt_sha_is_the_same_in_another_process(engine, model_path)
    _context_boundary(engine)
    _max_fills_the_context(engine)


@pytest.mark.engine
def test_run_bench_and_the_greedy_fast_path(engine: llamacpp.LlamaCppEngine,
                                            model_path: str) -> None:
    """run_bench's JSON results (speed, fidelity, engine timings), and the engine's argmax
    greedy loop against llama-cpp-python's sampler chain."""
    _run_bench_returns_json_results(engine)
    _greedy_fast_path_matches_the_sampler_chain(engine, model_path)
