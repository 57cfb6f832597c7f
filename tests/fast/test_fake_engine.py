"""The fake engine itself: deterministic, consistent between generation and scoring,
and misbehaving exactly where asked (the fast tier relies on all of it)."""

from __future__ import annotations

import numpy as np
import pytest

from abgate.engines import engine_class
from abgate.engines.base import Engine, GenerationRequest, SamplingParams
from abgate.engines.fake import EOS, FakeEngine, solve
from abgate.errors import AbgateError, UsageError

QUESTION = ("Ava has 12 apples. Ava buys 3 more apples at a market. By the end of the "
            "month Ava's collection doubles. Ava gives 5 apples to a friend. How many "
            "apples does Ava have now?")


def _req(rid: str = "r", question: str = QUESTION, **kw: object) -> GenerationRequest:
    return GenerationRequest(id=rid, params=SamplingParams(max_tokens=40, **kw),  # type: ignore[arg-type]
                             messages=({"role": "user", "content": question},))


def _engine(**args: object) -> FakeEngine:
    adapter = engine_class("fake")
    engine = adapter.load(adapter.resolve_model(None), args)
    assert isinstance(engine, FakeEngine)
    return engine


def test_solves_the_synthetic_stories() -> None:
    assert solve(QUESTION) == (12 + 3) * 2 - 5
    assert solve("Sam has 9 shells. Sam shares all the shells equally among 3 boxes and "
                 "keeps one box. Sam then gets 2 packs with 4 shells in each.") == 3 + 8
    assert solve("no story, the last number 7") == 7


def test_greedy_reply_is_deterministic_and_correct() -> None:
    a, b = _engine(), _engine()
    ra, rb = a.generate([_req()])[0], b.generate([_req()])[0]
    assert ra.text == rb.text == "The answer is 25."
    assert ra.finish_reason == "stop" and ra.output_token_ids == rb.output_token_ids
    assert a.detokenize(ra.output_token_ids or []) == ra.text
    times = ra.token_times or []
    assert len(times) == ra.output_tokens and times == sorted(times)
    assert ra.t_first_token is not None and ra.t_first_token > ra.t_submit


def test_accuracy_knob_answers_a_fraction_wrong() -> None:
    engine = _engine(accuracy=0.0)
    assert engine.generate([_req()])[0].text == "The answer is 26."


def test_scores_agree_with_greedy_generation_and_perturbation_moves_them() -> None:
    base, same, moved = _engine(), _engine(), _engine(perturb=0.5)
    res = base.generate([_req()])[0]
    prompt, out = res.prompt_token_ids or [], res.output_token_ids or []
    s = base.score(prompt, out, 5)
    assert s.method == "full" and s.logprobs is not None
    assert s.top_ids[:, 0].tolist() == out  # greedy picked each row's argmax
    assert np.array_equal(s.logprobs, same.score(prompt, out, 5).logprobs)
    m = moved.score(prompt, out, 5)
    assert m.logprobs is not None and not np.array_equal(s.logprobs, m.logprobs)
    assert base.topk_trace(prompt, out, 3) == s.top_ids[:, :3].tolist()


def test_sampling_depends_on_the_seed_and_ignore_eos_runs_to_max_tokens() -> None:
    engine = _engine(margin=0.0)
    texts = {engine.generate([_req(temperature=1.0, seed=s)])[0].text for s in range(4)}
    assert len(texts) > 1
    again = _engine(margin=0.0).generate([_req(temperature=1.0, seed=0)])[0].text
    assert again in texts
    res = _engine().generate([_req(ignore_eos=True)])[0]
    assert res.output_tokens == 40 and res.finish_reason == "length"
    assert EOS not in (res.output_token_ids or [])


def test_top_k_and_no_scoring() -> None:
    engine = _engine(scoring="top_k")
    res = engine.generate([_req()])[0]
    s = engine.score(res.prompt_token_ids or [], res.output_token_ids or [], 4)
    assert s.method == "top_k" and s.logprobs is None and s.top_ids.shape[1] == 4
    none = _engine(scoring="none")
    assert none.capabilities.scoring is None
    with pytest.raises(AbgateError, match="cannot score"):
        none.score([1, 2], [3])


def test_prompt_states_are_counted_when_kept() -> None:
    engine = _engine()
    assert engine.prompts_restored is None
    assert engine.keep_prompt_states() is True
    res = engine.generate([_req()])[0]
    engine.score(res.prompt_token_ids or [], res.output_token_ids or [])
    assert engine.prompts_restored == 1


def test_faults_error_samples_and_crash() -> None:
    errors = _engine(error_rate=1.0).generate([_req("x"), _req("y")])
    assert [r.finish_reason for r in errors] == ["error", "error"]
    assert all("injected" in (r.error or "") for r in errors)
    crashing = _engine(crash_after=2)
    seen: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        crashing.generate([_req(str(i)) for i in range(5)],
                          on_result=lambda r: seen.append(r.request_id))
    assert seen == ["0", "1"]


def test_bad_fake_args_are_refused() -> None:
    with pytest.raises(UsageError, match="'error_rate' must be in"):
        _engine(error_rate=2.0)
    with pytest.raises(UsageError, match="takes no engine options"):
        engine_class("fake").load("fake", {}, {"concurrency": 2})


def test_base_class_answers_every_optional_feature() -> None:
    class Minimal(Engine):
        def generate(self, requests, on_result=None):  # type: ignore[no-untyped-def]
            return []

        def tokenize(self, text: str) -> list[int]:
            return []

        def render_prompt(self, messages):  # type: ignore[no-untyped-def]
            return []

        def describe(self):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        @classmethod
        def load(cls, model, args, options=None, run_dir=None):  # type: ignore[no-untyped-def]
            return cls()

    m = Minimal.load("m", {})
    with pytest.raises(UsageError, match="takes no engine options"):
        Minimal.check_options({"endpoint": "x"})
    assert Minimal.resolve_model("m") == "m" and Minimal.check_args({}) is None
    assert m.detokenize([1]) is None and m.topk_trace([1], [2], 3) is None
    assert m.keep_prompt_states() is False and m.prompts_restored is None
    assert m.text_stable is None and m.cleanup_evidence is None
    assert m.processes() and m.close() is None
    with pytest.raises(AbgateError, match="cannot score"):
        m.score([1], [2])
