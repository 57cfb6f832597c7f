"""Fidelity of abgate's speed figures against llama.cpp's own perf counters.

On SmolLM2-135M (the default model) through the embedded llama.cpp engine, run the
bench case ``--input-len`` / ``--output-len`` ``--repeats`` times (after ``--warmup``
warm-up requests) and print, per request and as median and min-max over the repeats:

- abgate's steady decode tok/s, (N - 1) / (t_last - t_first) from per-token timestamps;
- llama.cpp's decode tok/s, eval_tokens / eval_ms from its perf context (eval_tokens is
  N - 1: the last sampled token is never evaluated);
- their ratio (abgate / engine; 1 means perfect agreement);
- the per-token overhead of abgate's loop in microseconds,
  (t_last - t_first) / (N - 1) - eval_ms / eval_tokens (sampling + Python);
- the same for prefill: prompt tokens / TTFT against prompt_eval_tokens / prompt_eval_ms.

The machine's load average is printed before and after: other processes on the cores
make both figures noisy (llama.cpp's threads spin-wait), so run it on a quiet machine.

Run from the repository root::

    PYTHONPATH=src python benchmarks/fidelity_llamacpp.py [--repeats 10] \\
        [--input-len 512] [--output-len 128] [--engine-arg n_threads=2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from abgate.bench import BenchCase, run_bench
from abgate.engines.args import parse_pairs, validate_args
from abgate.engines.llamacpp import engine as llamacpp
from abgate.host import cpu_model

COLUMNS = (("abgate decode tok/s", "steady_decode_tps", "timing", ".2f"),
           ("engine decode tok/s", "engine_decode_tps", "fidelity", ".2f"),
           ("ratio", "decode_ratio", "fidelity", ".5f"),
           ("overhead us/token", "overhead_us_per_token", "fidelity", ".1f"),
           ("abgate prefill tok/s", "prefill_tps", "timing", ".1f"),
           ("engine prefill tok/s", "engine_prefill_tps", "fidelity", ".1f"),
           ("prefill ratio", "prefill_ratio", "fidelity", ".5f"))


def _values(samples: Sequence[dict[str, Any]], key: str, where: str) -> list[float]:
    return [float(s[where][key]) for s in samples if s[where][key] is not None]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--model", default=None)
    ap.add_argument("--engine-arg", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--json", default=None, help="also write the per-request figures here")
    a = ap.parse_args(argv)

    args = validate_args("llamacpp", parse_pairs(a.engine_arg, "--engine-arg"),
                         llamacpp.ARG_SPECS)
    model = llamacpp.resolve_model(a.model)
    load_before = os.getloadavg()
    engine = llamacpp.load(model, args)
    try:
        info = engine.describe()
        eff, version = info.effective_config, info.version
        res = run_bench(engine, [BenchCase(a.input_len, a.output_len)], warmup=a.warmup,
                        repeats=a.repeats)
    finally:
        engine.close()
    load_after = os.getloadavg()
    case = res.cases[0]
    measured = case.measured
    print(f"model: {os.path.basename(model)}  cpu: {cpu_model()}  "
          f"threads: {eff['n_threads']}  llama-cpp-python {version}")
    print(f"case: input {a.input_len} / output {a.output_len}, {a.warmup} warm-up + "
          f"{a.repeats} measured; prompt sha256 {case.prompt_sha256[:16]}...")
    print(f"load average (1 min) before/after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print()
    print(f"{'repeat':>6}  " + "  ".join(f"{c[0]:>20}" for c in COLUMNS))
    for s in measured:
        cells = [format(s[w][k], f) if s[w][k] is not None else "-" for _, k, w, f in COLUMNS]
        print(f"{s['index']:>6}  " + "  ".join(f"{c:>20}" for c in cells))
    print()
    for label, key, where, fmt in COLUMNS:
        xs = _values(measured, key, where)
        print(f"{label:>22}: median {format(statistics.median(xs), fmt)}  "
              f"min-max {format(min(xs), fmt)} - {format(max(xs), fmt)}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"load_before": load_before, "load_after": load_after,
                       "case": case.to_dict()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
