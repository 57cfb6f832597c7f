"""How much faster is a batched forward pass than decoding, per token, on this host?

The distribution-agreement scoring pass is a batched forward pass with logits at every
position; generation decodes one token at a time. On a GPU the first is far faster; on
a CPU with a tiny model the two are close, which bounds how cheap scoring can be.
Measures the embedded SmolLM2 through llama.cpp: prefill (logits of the last position
only), a batched pass keeping every position's logits (what scoring does), and
one-token decode steps; 3 repeats each, median and min-max printed.

    python benchmarks/prefill_vs_decode.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

from abgate.engines.llamacpp.engine import load, resolve_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    engine = load(resolve_model(None), {"n_threads": a.threads, "n_threads_batch": a.threads,
                                        "n_ctx": 2048})
    llm = engine._llm
    toks = engine.tokenize("The quick brown fox jumps over the lazy dog. " * 200)[: a.tokens + 1]
    rates: dict[str, list[float]] = {"prefill": [], "all logits": [], "decode": []}
    for _ in range(a.repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks[1:])
        rates["prefill"].append(a.tokens / (time.perf_counter() - t0))
        llm.reset()
        llm.eval(toks[:1])
        t0 = time.perf_counter()
        engine._decode_all_logits(toks[1:])
        rates["all logits"].append(a.tokens / (time.perf_counter() - t0))
        llm.reset()
        llm.eval(toks[:1])
        n = min(64, a.tokens)
        t0 = time.perf_counter()
        for t in toks[1:n + 1]:
            llm.eval([t])
        rates["decode"].append(n / (time.perf_counter() - t0))
    engine.close()
    print(f"threads={a.threads}, {a.tokens} tokens, {a.repeats} repeats (tok/s, median [min-max])")
    for name, r in rates.items():
        print(f"  {name:10s} {statistics.median(r):7.1f} [{min(r):.1f}-{max(r):.1f}]")
    ratio = statistics.median(rates["all logits"]) / statistics.median(rates["decode"])
    print(f"  scoring pass / decode speed: {ratio:.2f}x")


if __name__ == "__main__":
    main()
