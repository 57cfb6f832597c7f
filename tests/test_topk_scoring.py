"""Top-k teacher-forced scoring (served engines): the KL lower bound, the agreement rows
it yields, and the parsing of vLLM's prompt log-probs (in-process objects and the HTTP
JSON). The real-server tests are in tests/test_served_scoring.py."""

from __future__ import annotations

import json
import math
import types
from typing import Any

import httpx
import numpy as np
import pytest

from abgate.ab.evidence import agreement_row as typed_row
from abgate.compare.agreement import summarize_agreement
from abgate.compare.topk_kl import kl_lower_bound
from abgate.engines.base import TokenScores
from abgate.engines.openai import scoring as sc
from abgate.engines.shared.logits import scores_from_logits
from abgate.engines.shared.prompt_logprobs import prompt_position, scores_from_rows
from abgate.errors import AbgateError
from abgate.records.samples import Sample


def agreement_row(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The agreement.jsonl line as written (the typed row's JSON)."""
    return typed_row(*args, **kwargs).model_dump(mode="json")


def _log_softmax(x: np.ndarray) -> np.ndarray:
    return x - np.log(np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1,
                                                                       keepdims=True)) - x.max(
        axis=-1, keepdims=True)


def _top(lp: np.ndarray, k: int) -> dict[int, float]:
    return {int(i): float(lp[i]) for i in np.argsort(-lp, kind="stable")[:k]}


def test_the_bound_never_exceeds_the_full_kl_and_is_exact_at_full_k() -> None:
    rng = np.random.default_rng(7)
    vocab = 40
    for _ in range(200):
        a = rng.normal(size=vocab) * rng.uniform(0.3, 5.0)
        b = a + rng.normal(size=vocab) * rng.uniform(0.0, 3.0)
        la, lb = _log_softmax(a), _log_softmax(b)
        full = float(np.sum(np.exp(la) * (la - lb)))
        for k in (1, 3, 10, vocab):
            cand = _top(lb, k)
            bound = kl_lower_bound(_top(la, k), cand, math.exp(min(cand.values())))
            assert 0.0 <= bound <= full + 1e-9
        assert kl_lower_bound(_top(la, vocab), _top(lb, vocab), 0.0) == pytest.approx(full,
                                                                                      abs=1e-9)


def test_the_bound_sees_disjoint_top_tokens_and_is_zero_for_equal_reports() -> None:
    base = {1: math.log(0.9), 2: math.log(0.05)}
    cand = {3: math.log(0.9), 4: math.log(0.05)}
    # the baseline's 0.9 token has at most 0.05 under the candidate
    assert kl_lower_bound(base, cand, 0.05) > 0.9 * math.log(0.9 / 0.05) - 0.2
    assert kl_lower_bound(base, dict(base), 0.05) == pytest.approx(0.0, abs=1e-12)
    # a candidate whose rounded top-k sums past 1 leaves a remainder of "about 0", not 0
    rounded = kl_lower_bound({1: math.log(1 - 1e-6), 2: math.log(9e-7)},
                             {1: math.log(1 - 1e-6), 2: math.log(1.2e-6)}, 1e-9)
    assert 0.0 <= rounded < 1e-5
    # the baseline's mass is all reported and the candidate's unknown: cap bounds it
    assert kl_lower_bound({1: 0.0}, {2: math.log(0.5)}, 0.5) == pytest.approx(math.log(2))


def _seq(rng: np.random.Generator, n: int, vocab: int, noise: float) -> tuple[Any, Any]:
    a = rng.normal(size=(n, vocab)) * 3
    return a.astype(np.float32), (a + rng.normal(size=(n, vocab)) * noise).astype(np.float32)


def test_agreement_rows_for_every_mix_of_full_and_top_k() -> None:
    rng = np.random.default_rng(3)
    a, b = _seq(rng, 12, 60, 1.0)
    tokens = rng.integers(0, 60, size=12).tolist()
    fa, fb = scores_from_logits(a, tokens, 20), scores_from_logits(b, tokens, 20)
    ka, kb = fa.as_top_k(20), fb.as_top_k(20)
    sample = Sample(key="x#0", item_id="x", seed=0)
    full = agreement_row(sample, fa, fb)
    assert full["method"] == "full" and full["k"] is None
    for base, cand in ((fa, kb), (ka, fb), (ka, kb)):
        row = agreement_row(sample, base, cand)
        assert row["method"] == "top_k" and row["k"] == 20
        assert all(lo <= hi + 1e-5 for lo, hi in zip(row["kl"], full["kl"], strict=True))
        assert row["top1_base"] == full["top1_base"] and row["top1_cand"] == full["top1_cand"]
        json.dumps(row, allow_nan=False)  # unknown token log-probs are null, not NaN
    # a server's rounded top-k may sum past 1: the token it left out is still possible
    over = TokenScores.from_top_k([1], [[(1, 1e-7), (2, -20.0)]], [1e-7], 2)
    under = TokenScores.from_top_k([1], [[(1, math.log(1 - 1e-6)), (3, math.log(1e-6))]],
                                   [math.log(1 - 1e-6)], 2)
    assert agreement_row(sample.model_copy(update={"key": "y#0"}), under, over)["kl"][0] < 1e-4
    both = agreement_row(sample, ka, kb)
    assert None in both["logp_cand"] or None in both["logp_base"]
    assert agreement_row(sample, ka, ka)["kl"] == [0.0] * 12
    section = summarize_agreement([both])
    assert section.measured and section.approximate and section.k == 20
    assert section.mean_kld.estimate <= summarize_agreement([full]).mean_kld.estimate
    with pytest.raises(AbgateError, match="different token sequences"):
        agreement_row(sample, ka, scores_from_logits(b, tokens[::-1], 20).as_top_k(20))


def test_from_top_k_pads_and_orders() -> None:
    s = TokenScores.from_top_k([5, 6], [[(3, -2.0), (5, -0.5)], [(6, -0.1)]], [-0.5, None], 3)
    assert s.top_ids.tolist() == [[5, 3, -1], [6, -1, -1]]
    assert math.isinf(float(s.top_logprobs[1, 2])) and math.isnan(float(s.token_logprobs[1]))
    with pytest.raises(ValueError, match="2 tokens but 1 top-k lists"):
        TokenScores.from_top_k([5, 6], [[(3, -2.0)]], [None, None], 3)


# -- vLLM's prompt log-probs ----------------------------------------------------------


def _vllm_json_rows(prompt: list[int], cont: list[int], k: int) -> list[Any]:
    """``prompt_logprobs`` as vLLM's OpenAI server serialises them (vllm/logprobs.py:
    ``list[dict[int, Logprob] | None]``; IDs become JSON strings): the first position is
    null; each other holds the top-k and the prompt token with its rank."""
    rows: list[Any] = [None]
    for pos, token in enumerate((prompt + cont)[1:]):
        top = {str(100 + r): {"logprob": -0.1 * (r + 1) - pos * 0.01, "rank": r + 1,
                              "decoded_token": f"t{r}"} for r in range(k)}
        top[str(token)] = {"logprob": -7.5, "rank": 4000, "decoded_token": "x"}
        rows.append(top)
    return rows


def test_vllm_rows_become_top_k_scores() -> None:
    prompt, cont = [1, 2, 3], [9, 101, 8]
    rows = _vllm_json_rows(prompt, cont, 4)
    rows[4]["101"]["rank"] = 2  # the scored token is in the top-k here
    rows[4]["101"]["logprob"] = -0.2
    s = scores_from_rows(rows, prompt, cont, 4)
    assert s.method == "top_k" and s.tokens == (9, 101, 8)
    assert s.top_ids[0].tolist() == [100, 101, 102, 103]
    assert s.token_logprobs.tolist() == pytest.approx([-7.5, -0.2, -7.5])
    pairs, own = prompt_position(
        {7: types.SimpleNamespace(logprob=-1.0, rank=1, decoded_token="a"),
         8: types.SimpleNamespace(logprob=-3.0, rank=9, decoded_token="b")}, 8, 1, "p[1]")
    assert pairs == [(7, -1.0)] and own == -3.0  # in-process: Logprob objects, int keys
    with pytest.raises(AbgateError, match="returned 2 prompt log-prob rows for 6 tokens"):
        scores_from_rows(rows[:2], prompt, cont, 4)
    with pytest.raises(AbgateError, match="token ID 'x' is not an integer"):
        prompt_position({"x": {"logprob": -1.0}}, 1, 1, "p[1]")


def test_openai_scorer_asks_vllm_for_prompt_logprobs_over_the_exact_ids() -> None:
    seen: list[dict[str, Any]] = []

    def vllm(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if body["prompt_logprobs"] > 20:
            return httpx.Response(400, json={"message": "Requested prompt logprobs of 30, "
                                                        "which is greater than max allowed: 20"})
        rows = _vllm_json_rows(body["prompt"][:2], body["prompt"][2:], body["prompt_logprobs"])
        return httpx.Response(200, json={"choices": [{"text": "x", "prompt_logprobs": rows}]})

    scorer = sc.Scorer("vllm", "http://vllm.invalid", {}, "m", 5.0)
    scorer._client = httpx.Client(base_url="http://vllm.invalid",
                                  transport=httpx.MockTransport(vllm))
    s = scorer.score([1, 2], [3, 4, 5], 20)
    assert seen[0] | {"prompt_logprobs": 0} == {
        "model": "m", "prompt": [1, 2, 3, 4, 5], "max_tokens": 1, "temperature": 0.0,
        "prompt_logprobs": 0, "stream": False}
    assert s.top_ids.shape == (3, 20)
    with pytest.raises(AbgateError, match="HTTP 400.*--max-logprobs"):
        scorer.score([1, 2], [3], 30)
    scorer.close()


def test_openai_scorer_asks_sglang_generate_and_checks_the_alignment() -> None:
    """SGLang's native /generate (python/sglang/srt/managers/io_struct.py: input_ids,
    return_logprob, logprob_start_len, top_logprobs_num; meta_info rows are [logprob,
    token_id, text]), one entry per input position from logprob_start_len on."""
    seen: list[dict[str, Any]] = []
    shift = {"by": 0}

    def sglang(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        ids, start, k = body["input_ids"], body["logprob_start_len"], body["top_logprobs_num"]
        positions = range(start + shift["by"], len(ids))
        own = [[None if i == 0 else -0.25, ids[i], None] for i in positions]
        top = [None if i == 0 else [[-0.1 * (r + 1), 200 + r, None] for r in range(k)]
               for i in positions]
        if shift.get("extra"):  # e.g. the generated token counted as an input position
            own.append([-1.0, 999, None])
            top.append([[-1.0, 999, None]])
        return httpx.Response(200, json={"text": "x", "meta_info": {
            "input_token_logprobs": own, "input_top_logprobs": top}})

    scorer = sc.Scorer("sglang", "http://sglang.invalid", {}, "m", 5.0)
    scorer._client = httpx.Client(base_url="http://sglang.invalid",
                                  transport=httpx.MockTransport(sglang))
    s = scorer.score([1, 2, 3], [7, 8], 4)
    assert seen[0] == {"input_ids": [1, 2, 3, 7, 8], "return_logprob": True,
                       "top_logprobs_num": 4, "logprob_start_len": 2,
                       "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
    assert s.top_ids.tolist() == [[200, 201, 202, 203]] * 2
    assert s.token_logprobs.tolist() == [-0.25, -0.25]
    shift["extra"] = 1
    with pytest.raises(AbgateError, match="do not line up"):
        scorer.score([1, 2, 3], [7, 8], 4)
    shift["extra"], shift["by"] = 0, 3  # fewer positions than the continuation has
    with pytest.raises(AbgateError, match="covering the 2 continuation tokens"):
        scorer.score([1, 2, 3], [7, 8], 4)
    scorer.close()


def test_servers_that_cannot_score_say_why() -> None:
    for kind in ("llama-cpp-python", "unknown"):
        r = sc.route(kind)
        assert r.method is None and r.why_not
        scorer = sc.Scorer(kind, "http://x.invalid", {}, "m", 5.0)
        with pytest.raises(AbgateError, match="cannot score on this server"):
            scorer.score([1], [2], 5)
        scorer.close()
    assert {sc.route(k).method for k in ("vllm", "llama.cpp", "sglang")} == {"top_k"}
