"""Teacher-forced top-k scoring on a real server (llama.cpp's llama-server, built by
tests/tools/build_llama_server.sh): the scores agree with the embedded engine on the
same GGUF, an A/A is exactly zero, and a served A/B rejects a broken-RoPE arm on the
distribution gates (a lower bound of the KL) while a q8_0 KV arm is not rejected.
Skipped where llama-server is not built. The vLLM path is in tests/test_topk_scoring.py
(no vLLM here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from abgate.ab.evidence import SCORE_K
from abgate.ab.evidence import agreement_row as typed_row
from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.engines.llamacpp import engine as llamacpp
from abgate.engines.openai import engine as openai_compat
from abgate.records.samples import Sample
from tests.conftest import (
    abgate,
    llama_server_args,
    llama_server_launch,
    needs_llama_server,
    requested_threads,
)
from tests.test_served_ab import check_ab


def agreement_row(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The agreement.jsonl line as written (the typed row's JSON)."""
    return typed_row(*args, **kwargs).model_dump(mode="json")


SERVED_ITEMS = 6
QUESTION = ({"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples "
                                        "does he have? Explain step by step."},)


def _served(tmp_path: Path, **flags: Any) -> openai_compat.OpenAIEngine:
    n = requested_threads(1)
    args = {"ctx-size": 2048, "threads": n, "threads-batch": n, "parallel": 1,
            "no-webui": True, **flags}
    return openai_compat.load("", args, {"launch": llama_server_launch(),
                                         "ready_timeout": 120.0}, tmp_path)


@pytest.fixture(scope="module")
def embedded() -> Iterator[llamacpp.LlamaCppEngine]:
    engine = llamacpp.load(str(llamacpp.default_model_path()),
                           {"n_ctx": 2048, "n_threads": requested_threads(1) or 1})
    yield engine
    engine.close()


def _llama_server_scores_agree_with_the_embedded_engine(
        tmp_path: Path, embedded: llamacpp.LlamaCppEngine) -> None:
    prompt = embedded.render_prompt(QUESTION)
    (out,) = embedded.generate([GenerationRequest(id="0", prompt_token_ids=tuple(prompt),
                                                  params=SamplingParams(max_tokens=32))])
    cont = list(out.output_token_ids or ())
    full = embedded.score(prompt, cont, SCORE_K)
    sample = Sample(key="q#0", item_id="q", seed=0)
    served = _served(tmp_path)
    broken = _served(tmp_path / "rope", **{"rope-freq-base": 1.0})
    try:
        assert served.capabilities.scoring == "top_k"
        assert served.describe().effective_config["scoring"]["method"] == "top_k"
        topk = served.score(prompt, cont, SCORE_K)
        again = served.score(prompt, cont, SCORE_K)
        bad = broken.score(prompt, cont, SCORE_K)
    finally:
        served.close()
        broken.close()
    for engine in (served, broken):
        assert engine.cleanup_evidence and engine.cleanup_evidence["verified"]
    assert topk.method == "top_k" and topk.tokens == tuple(cont)
    assert topk.top_ids.shape == (len(cont), SCORE_K)
    # the same GGUF and llama.cpp, another batch shape: the same greedy choices (a
    # near-tie may flip on another CPU, hence a share) and close log-probs
    same_top1 = np.mean(topk.top_ids[:, 0] == full.top_ids[:, 0])
    assert same_top1 >= 0.9, same_top1
    known = np.isfinite(topk.token_logprobs)
    assert known.mean() >= 0.9  # greedy tokens are in the top-20
    assert np.max(np.abs(topk.token_logprobs[known] - full.token_logprobs[known])) < 0.5
    # served A/A: the same requests, the same numbers up to a batch-shape wobble (the
    # second pass finds the whole prompt cached; on some CPUs a one-token batch rounds
    # differently), far below the lossless limit; embedded vs served: small; a wrong
    # RoPE base: a lower bound far above both
    assert max(agreement_row(sample, topk, again)["kl"]) < 1e-4
    close = np.mean(agreement_row(sample, full, topk)["kl"])
    damaged = np.mean(agreement_row(sample, full, bad)["kl"])
    assert damaged > 0.5 and damaged > 20 * close, (close, damaged)


def _served_ab_rejects_broken_rope_on_top_k_agreement(tmp_path: Path,
                                                           gsm8k_path: Path) -> None:
    """Three llama-server arms on 6 zero-shot GSM8K items of 16 tokens, under a policy
    that decides from 6 items: f16 KV, q8_0 KV + flash attention, a wrong RoPE base.
    Accuracy is at the model's floor; the KL bound decides. Also llama-server's A/B of
    launched servers (was tests/test_llama_server.py's own f16/q8 A/B): server-rendered
    prompts matched pair by pair, each arm's cleanup verified, its flags and log."""
    (tmp_path / "policy.toml").write_text(f"min_items = {SERVED_ITEMS}\n"
                                          "[speed]\nmax_slowdown = 0.9\n")
    exp = tmp_path / "exp.toml"
    exp.write_text(f"""
name = "served-agreement"
baseline = "f16"
policy = "{tmp_path / 'policy.toml'}"
[shared]
engine = "openai"
suite = "gsm8k"
data = "{gsm8k_path}"
limit = {SERVED_ITEMS}
max_tokens = 16
engine_args = {llama_server_args()}
engine_options = {{ launch = "{llama_server_launch()}", ready_timeout = 120.0 }}
[schedule]
mode = "interleave"
warmup = 0
[evidence]
probes = false
agreement_tokens = 16
[arms.f16]
[arms.q8]
engine_args = {{ flash-attn = "on", cache-type-k = "q8_0", cache-type-v = "q8_0" }}
[arms.rope]
engine_args = {{ rope-freq-base = 1.0 }}
""")
    out = tmp_path / "AB"
    r = abgate("ab", str(exp), "-o", str(out), timeout=1200)
    assert r.returncode == 1, r.stdout + r.stderr  # REJECT: the broken arm
    comp = json.loads((out / "comparison.json").read_text())["comparisons"]
    rope, q8 = comp["rope"], comp["q8"]
    failing = {g["name"] for g in rope["verdict"]["gates"] if g["outcome"] == "fail"}
    assert rope["verdict"]["decision"] == "REJECT" and "mean_kld" in failing, failing
    assert q8["verdict"]["decision"] != "REJECT", q8["verdict"]["reasons"]
    for c in (rope, q8):
        agreement = c["comparison"]["agreement"]
        assert agreement["method"] == "top_k" and agreement["approximate"]
        assert agreement["k"] == SCORE_K and agreement["n_items"] == SERVED_ITEMS
        assert agreement["source"] == "baseline_output_retokenized"  # no IDs from the server
        assert agreement["n_nonfinite_kl"] == 0
    assert (rope["comparison"]["agreement"]["mean_kld"]["estimate"]
            > 50 * q8["comparison"]["agreement"]["mean_kld"]["estimate"])
    scoring = json.loads((out / "ab.json").read_text())["scoring"]
    assert {a: s["method"] for a, s in scoring.items()} == {"f16": "top_k", "q8": "top_k",
                                                            "rope": "top_k"}
    assert "approximate" in (out / "report.md").read_text()
    check_ab(out, r.returncode, {"f16": "server", "q8": "server", "rope": "server"})
    eff = json.loads((out / "arms" / "q8" / "run.json").read_text())["engine"]["effective"]
    assert eff["server_kind"] == "llama.cpp" and "apply-template" in eff["chat_prompts"]["method"]
    assert eff["launch"][-6:] == ["--flash-attn", "on", "--cache-type-k", "q8_0",
                                  "--cache-type-v", "q8_0"]
    assert (out / "arms" / "q8" / "server-llama-server.log").exists()


@needs_llama_server
@pytest.mark.engine
@pytest.mark.cost(28)
def test_served_scoring_on_llama_server(tmp_path: Path, gsm8k_path: Path,
                                       embedded: llamacpp.LlamaCppEngine) -> None:
    """llama-server's top-k scores against the embedded engine's, and a served A/B that
    rejects a broken RoPE on top-k agreement (one test: one condition, llama-server
    built). An embedded full-vocabulary baseline against a served top-k candidate:
    tests/test_served_ab.py's embedded-vs-served A/B, whose llama-server arm is one."""
    for d in ("scores", "rope"):
        (tmp_path / d).mkdir()
    _llama_server_scores_agree_with_the_embedded_engine(tmp_path / "scores", embedded)
    _served_ab_rejects_broken_rope_on_top_k_agreement(tmp_path / "rope", gsm8k_path)
