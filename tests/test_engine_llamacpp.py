"""The embedded llama.cpp engine, for real, on SmolLM2-135M.

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

pytestmark = pytest.mark.engine

MSGS = ({"role": "user", "content": "What is 7 + 5? Answer with \\boxed{}."},)


@pytest.fixture(scope="module")
def engine(model_path: str) -> Iterator[llamacpp.LlamaCppEngine]:
    e = llamacpp.load(model_path, {"n_ctx": 1024, **engine_threads()})
    yield e
    e.close()


def req(max_tokens: int = 48, **kw: object) -> GenerationRequest:
    return GenerationRequest(id="r", params=SamplingParams(max_tokens=max_tokens, **kw),  # type: ignore[arg-type]
                             messages=MSGS)


def test_is_an_engine(engine: llamacpp.LlamaCppEngine) -> None:
    assert isinstance(engine, Engine)
    info = engine.describe()
    assert info.name == "llamacpp" and info.version
    eff = info.effective_config
    assert eff["n_ctx"] == 1024 and eff["type_k"] == "f16" and eff["flash_attn"] is False
    assert eff["n_threads"] >= 1
    if engine_threads():
        assert eff["n_threads"] == eff["n_threads_batch"] == engine_threads()["n_threads"]
    assert info.capabilities.token_ids and info.capabilities.streaming


def test_greedy_is_deterministic_in_process(engine: llamacpp.LlamaCppEngine) -> None:
    a, b = engine.generate([req(), req()])
    assert a.output_token_ids == b.output_token_ids and a.text == b.text
    assert a.output_tokens == len(a.output_token_ids or []) > 0
    assert a.prompt_tokens == len(engine.render_prompt(MSGS))


def test_timestamps_are_per_token(engine: llamacpp.LlamaCppEngine) -> None:
    r = engine.generate([req(max_tokens=16, ignore_eos=True)])[0]
    assert r.finish_reason == "length" and r.output_tokens == 16
    assert r.token_times is not None and len(r.token_times) == 16
    assert r.t_submit < r.token_times[0] == r.t_first_token
    assert r.token_times == sorted(r.token_times) and r.token_times[-1] == r.t_last_token
    assert r.engine_timings["prompt_eval_tokens"] == r.prompt_tokens


QUESTIONS = ("What is 7 + 5? Answer with \\boxed{}.", "Say hello.", "What is 2 + 2?",
             "Name a colour.")


def ask(question: str, max_tokens: int = 200, **kw: object) -> GenerationRequest:
    return GenerationRequest(id="q", params=SamplingParams(max_tokens=max_tokens, **kw),  # type: ignore[arg-type]
                             messages=({"role": "user", "content": question},))


def test_natural_stop_and_stop_strings(engine: llamacpp.LlamaCppEngine) -> None:
    # Whether one given prompt ends in EOS within the limit is a figure of this CPU's
    # numerics; that finish_reason says which happened, and that one of a few short
    # questions ends naturally, holds on any host.
    seen = []
    for question in QUESTIONS:
        r = engine.generate([ask(question)])[0]
        assert r.finish_reason == ("length" if r.output_tokens == 200 else "stop"), r
        seen.append((r.finish_reason, r.text[:60]))
        if r.finish_reason == "stop" and len(r.text.strip()) >= 3:
            break  # EOS, not the limit
    else:
        pytest.fail(f"no question ended with EOS: {seen}")
    full = r.text
    cut_at = full.strip()[:3]
    s = engine.generate([ask(question, stop=(cut_at[-1],))])[0]
    assert s.finish_reason == "stop" and len(s.text) < len(full)
    assert cut_at[-1] not in s.text
    assert full.startswith(s.text)  # the same greedy tokens, cut at the stop string


def test_context_overflow_is_an_error_result(engine: llamacpp.LlamaCppEngine) -> None:
    r = engine.generate([req(max_tokens=5000)])[0]
    assert r.finish_reason == "error" and r.error and "exceeds the context" in r.error


def test_seeded_sampling_repeats(engine: llamacpp.LlamaCppEngine) -> None:
    a = engine.generate([req(temperature=1.0, seed=11), req(temperature=1.0, seed=11)])
    assert a[0].output_token_ids == a[1].output_token_ids


def test_missing_and_non_gguf_model(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    with pytest.raises(UsageError, match="model file not found"):
        llamacpp.resolve_model(str(d / "nope.gguf"))
    (d / "x.gguf").write_bytes(b"NOTGGUF")
    with pytest.raises(UsageError, match="not a GGUF file"):
        llamacpp.resolve_model(str(d / "x.gguf"))


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


def test_scoring_restores_the_prompt_kept_from_generation(model_path: str) -> None:
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
