"""The embedded llama.cpp engine, for real, on SmolLM2-135M: what is llama.cpp's own
(effective config, engine timings, determinism across processes, kept prompt states);
the contract every adapter keeps (determinism in process, timestamps, stops, context
overflow, seeded sampling) is tests/test_adapter_contract.py.

Greedy tokens are a product of this CPU's SIMD paths and the thread count, so these tests
assert determinism within the host (one process, or two at the same thread count) and
behaviour (stops, timestamps, errors), never a token sequence or text from one machine."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from abgate.engines.base import Engine, GenerationRequest, SamplingParams
from abgate.engines.llamacpp import engine as llamacpp
from abgate.errors import UsageError
from tests.conftest import HANG_S, engine_threads

MSGS = ({"role": "user", "content": "What is 7 + 5? Answer with \\boxed{}."},)


@pytest.fixture(scope="module")
def engine(model_path: str) -> Iterator[llamacpp.LlamaCppEngine]:
    e = llamacpp.load(model_path, {"n_ctx": 1024, **engine_threads()})
    yield e
    e.close()


def req(max_tokens: int = 48, **kw: object) -> GenerationRequest:
    return GenerationRequest(id="r", params=SamplingParams(max_tokens=max_tokens, **kw),  # type: ignore[arg-type]
                             messages=MSGS)


@pytest.mark.engine
def test_effective_config_timings_and_kept_prompt_states(engine: llamacpp.LlamaCppEngine,
                                                         model_path: str) -> None:
    """llama.cpp's own part of the contract (the rest: tests/test_adapter_contract.py):
    its effective config and engine timings, and score() restoring kept prompt states."""
    _effective_config_and_engine_timings(engine)
    _scoring_restores_the_prompt_kept_from_generation(model_path)


def _effective_config_and_engine_timings(engine: llamacpp.LlamaCppEngine) -> None:
    assert isinstance(engine, Engine)
    eff = engine.describe().effective_config
    assert eff["n_ctx"] == 1024 and eff["type_k"] == "f16" and eff["flash_attn"] is False
    assert eff["n_threads"] >= 1
    if engine_threads():
        assert eff["n_threads"] == eff["n_threads_batch"] == engine_threads()["n_threads"]
    r = engine.generate([req(max_tokens=4, ignore_eos=True)])[0]
    assert r.token_times is not None and r.token_times[0] == r.t_first_token
    assert r.engine_timings["prompt_eval_tokens"] == r.prompt_tokens


def test_missing_and_non_gguf_model(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    with pytest.raises(UsageError, match="model file not found"):
        llamacpp.resolve_model(str(d / "nope.gguf"))
    (d / "x.gguf").write_bytes(b"NOTGGUF")
    with pytest.raises(UsageError, match="not a GGUF file"):
        llamacpp.resolve_model(str(d / "x.gguf"))


@pytest.mark.engine
def test_greedy_is_deterministic_across_processes(model_path: str) -> None:
    # Two processes at the same (explicit) thread count on one host; a token sequence
    # recorded on another host or at another thread count need not match.
    threads = engine_threads() or {"n_threads": llamacpp.default_threads(),
                                   "n_threads_batch": llamacpp.default_threads()}
    code = (
        "import json; from abgate.engines.llamacpp import engine as llamacpp; "
        "from abgate.engines.base import GenerationRequest, SamplingParams; "
        f"e = llamacpp.load({model_path!r}, {{'n_ctx': 1024, **{threads!r}}}); "
        f"r = e.generate([GenerationRequest(id='r', params=SamplingParams(max_tokens=48), "
        f"messages={MSGS!r})])[0]; print(json.dumps(r.output_token_ids))"
    )
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=HANG_S).stdout for _ in range(2)]
    assert json.loads(outs[0]) == json.loads(outs[1]) and json.loads(outs[0])


def _scoring_restores_the_prompt_kept_from_generation(model_path: str) -> None:
    """With prompt states kept (what an A/B with distribution agreement asks for), score()
    restores the prompt's KV cells instead of prefilling it; the scores agree with a
    fresh prefill to float round-off, and greedy generation is unchanged."""
    e = llamacpp.load(model_path, {"n_ctx": 1024, **engine_threads()})
    try:
        plain = e.generate([req(max_tokens=24, ignore_eos=True)])[0]
        fresh = e.score(plain.prompt_token_ids or [], plain.output_token_ids or [])
        e.keep_prompt_states()
        kept = e.generate([req(max_tokens=24, ignore_eos=True)])[0]
        assert kept.output_token_ids == plain.output_token_ids  # keeping changes nothing
        restored = e.score(kept.prompt_token_ids or [], kept.output_token_ids or [])
        assert e._states.hits == 1 and e._states.misses == 0
        assert restored.logprobs is not None and fresh.logprobs is not None
        assert abs(restored.logprobs - fresh.logprobs).max() < 1e-3
        # batch shapes differ (kept from a prompt-sized pass vs a fresh one): a near-tie
        # may flip on some CPU, so a share, not every position
        assert (restored.top_ids[:, 0] == fresh.top_ids[:, 0]).mean() >= 0.9
        other = e.render_prompt(({"role": "user", "content": "Name a colour."},))
        e.score(other, (plain.output_token_ids or [])[:4])  # never generated: prefilled
        assert e._states.misses == 1
        again = e.generate([req(max_tokens=24, ignore_eos=True)])[0]
        assert again.output_token_ids == plain.output_token_ids
    finally:
        e.close()
