"""Calibrate the distribution-agreement gates on the embedded SmolLM2-135M (llama.cpp).

The baseline (SmolLM2 Q4_1, default engine args) answers N zero-shot GSM8K items
greedily; every arm then scores the baseline's outputs teacher-forced, exactly as
``abgate ab`` does, and the same statistics and gates as a verdict are applied. Arms:
legitimate switches that must NOT fail the gates (A/A, flash attention, q8_0 / q4_0 KV
cache, a Q8_0 re-quantised model) and broken numerics that MUST fail them (a wrong
RoPE base, a wrong RoPE scale, a corrupted tensor).

    python benchmarks/agreement_calibration.py --items 40 --max-tokens 96 --score-tokens 64 \
        --threads 1 --data ../shared/data/gsm8k/test.jsonl \
        --out benchmarks/results/agreement_calibration.json

``--top-k K`` (default 20, as ``abgate ab`` asks served engines) also judges every arm as
a top-k server would report both arms: the KL lower bound of served scoring.
``--score-tokens`` is ``abgate ab``'s ``[evidence] agreement_tokens`` (the first N
output tokens of each sample are scored; 0: all).

Prints a Markdown table (the one in docs/statistics.md, "Calibration").
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from abgate.ab.evidence import SCORE_K, agreement_row
from abgate.compare.agreement import summarize_agreement
from abgate.compare.agreement_gates import agreement_gates
from abgate.compare.policy import Policy, load_policy
from abgate.engines.base import GenerationRequest, SamplingParams, TokenScores
from abgate.engines.llamacpp.engine import load, resolve_model
from abgate.suites import load_suite
from abgate.suites.prompts import PromptConfig, build_messages
from abgate.weights.readers import read_gguf_tensors


def requantized(model: str, out: Path) -> str:
    """SmolLM2 re-quantised Q4_1 -> Q8_0 with llama.cpp's own quantizer."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(model.encode(), str(out).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize failed ({rc})")
    return str(out)


def corrupted(model: str, out: Path, tensor: str = "blk.15.ffn_down.weight",
              seed: int = 0) -> str:
    """A copy whose ``tensor`` has its quantisation blocks shuffled (same values, wrong
    places: what a bad offset or a wrong layout does), no NaNs introduced."""
    data = bytearray(Path(model).read_bytes())
    t = next(x for x in read_gguf_tensors(Path(model)) if x.name == tensor)
    block = 20  # Q4_1: f16 scale + f16 min + 16 bytes of 4-bit values = 32 weights
    n = t.n_bytes // block
    blocks = np.frombuffer(bytes(data[t.start:t.start + n * block]), np.uint8).reshape(n, block)
    data[t.start:t.start + n * block] = blocks[np.random.default_rng(seed).permutation(n)].tobytes()
    out.write_bytes(bytes(data))
    return str(out)


def arms(model: str, tmp: Path) -> dict[str, tuple[str, dict[str, Any], str]]:
    """name -> (model path, engine args, what is expected of the gates)."""
    q8kv = {"flash_attn": True, "type_k": 8, "type_v": 8}
    return {
        "A/A (identical)": (model, {}, "pass"),
        "flash attention": (model, {"flash_attn": True}, "not fail"),
        "q8_0 KV + flash attention": (model, q8kv, "not fail"),
        "q4_0 KV + flash attention": (model, {"flash_attn": True, "type_k": 2, "type_v": 2},
                                      "not fail"),
        "Q8_0 re-quantised model": (requantized(model, tmp / "q8_0.gguf"), {}, "not fail"),
        "RoPE base 1.0 (broken)": (model, {"rope_freq_base": 1.0}, "fail"),
        "RoPE scale 0.25 (broken)": (model, {"rope_freq_scale": 0.25}, "fail"),
        "shuffled blk.15.ffn_down (broken)": (corrupted(model, tmp / "corrupt.gguf"), {},
                                              "fail"),
    }


def judge(keys: list[dict[str, Any]], base: list[TokenScores], cand: list[TokenScores],
          policy: Policy) -> tuple[dict[str, Any], dict[str, str]]:
    """The agreement section and the gate outcomes, as a verdict computes them."""
    rows = [agreement_row(key, b, c) for key, b, c in zip(keys, base, cand, strict=True)]
    summary = summarize_agreement(rows, confidence=0.95)
    return summary, {g.name: g.outcome
                     for g in agreement_gates({"agreement": summary}, policy)}


def print_tables(results: list[dict[str, Any]], top_k: int) -> None:
    """The Markdown tables of docs/statistics.md, "Calibration"."""
    print("| arm | mean KLD (95% CI) | KLD p99 | top-1 agreement (95% CI) | gates | expected |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        m, t = r["mean_kld"], r["top1"]
        print(f"| {r['arm']} | {m['estimate']:.4g} ({m['ci'][0]:.3g}–{m['ci'][1]:.3g}) | "
              f"{r['kl_percentiles']['p99']:.3g} | {t['estimate']:.3f} "
              f"({t['ci'][0]:.3f}–{t['ci'][1]:.3f}) | "
              f"{', '.join(f'{k} {v}' for k, v in r['gates'].items())} | {r['expect']} |")
    if top_k:
        print(f"\nAs top-{top_k} servers report it (KL lower bound):\n")
        print("| arm | full mean KLD | top-k bound (95% CI) | bound / full | gates |")
        print("| --- | --- | --- | --- | --- |")
        for r in results:
            full, m = r["mean_kld"]["estimate"], r["top_k"]["mean_kld"]
            ratio = f"{m['estimate'] / full:.3f}" if full else "–"
            print(f"| {r['arm']} | {full:.4g} | {m['estimate']:.4g} ({m['ci'][0]:.3g}–"
                  f"{m['ci'][1]:.3g}) | {ratio} | "
                  f"{', '.join(f'{k} {v}' for k, v in r['top_k']['gates'].items())} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/gsm8k/test.jsonl")
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--score-tokens", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=20,
                    help="also judge each arm as a top-k server would report it (0: off)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    threads = {"n_threads": a.threads, "n_threads_batch": a.threads} if a.threads else {}
    model = resolve_model(None)
    suite = load_suite("gsm8k", a.data, "easy", 0)
    items = suite.items[: a.items]
    base = load(model, threads)
    samples, gen_s = [], 0.0
    for item in items:
        msgs = build_messages(item, PromptConfig(0, None, None), ())
        r = base.generate([GenerationRequest(item.id, SamplingParams(max_tokens=a.max_tokens),
                                             messages=msgs)])[0]
        gen_s += (r.t_last_token or r.t_submit) - r.t_submit
        out = r.output_token_ids or []
        samples.append((item.id, r.prompt_token_ids,
                        out[: a.score_tokens] if a.score_tokens else out))
    policy = load_policy()
    t0 = time.perf_counter()
    base_scores = [base.score(p, o, SCORE_K) for _, p, o in samples]
    base_score_s = time.perf_counter() - t0
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (path, args, expect) in arms(model, Path(tmp)).items():
            eng = load(path, {**threads, **args})
            t0 = time.perf_counter()
            keys = [{"key": f"{i}#0", "item_id": i, "seed": 0} for i, *_ in samples]
            cand = [eng.score(p, o, SCORE_K) for _, p, o in samples]
            score_s = time.perf_counter() - t0
            eng.close()
            summary, gates = judge(keys, base_scores, cand, policy)
            results.append({"arm": name, "expect": expect, "args": args,
                            "mean_kld": summary["mean_kld"], "kl_percentiles":
                            summary["kl_percentiles"], "top1": summary["top1_agreement"],
                            "gates": gates, "score_seconds": score_s})
            if a.top_k:  # both arms as a top-k server reports them: the KL lower bound
                top, top_gates = judge(keys, [s.as_top_k(a.top_k) for s in base_scores],
                                       [s.as_top_k(a.top_k) for s in cand], policy)
                results[-1]["top_k"] = {"k": a.top_k, "mean_kld": top["mean_kld"],
                                        "gates": top_gates}
            print(f"{name}: {json.dumps(results[-1]['gates'])}", flush=True)
    n_tok = sum(len(o) for *_, o in samples)
    print(f"\n{len(items)} items, {n_tok} scored tokens; baseline generation {gen_s:.1f} s, "
          f"baseline scoring {base_score_s:.1f} s\n")
    print_tables(results, a.top_k)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"items": len(items), "max_tokens": a.max_tokens,
                                     "score_tokens": a.score_tokens,
                                     "scored_tokens": n_tok, "generation_s": gen_s,
                                     "baseline_scoring_s": base_score_s, "arms": results},
                                    indent=1) + "\n")


if __name__ == "__main__":
    main()
