"""``abgate bench --load concurrency:N|poisson:RATE``: the served load shapes (docs/load.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from abgate.bench.load import LoadSpec
from abgate.bench.load_run import LoadJob, load_prompts, run_load
from abgate.errors import UsageError


def run_load_bench(spec: LoadSpec, engine: dict[str, Any], *, data: str | None,
                   output_len: int, out: Path | None, force: bool, warmup: int = 1,
                   procs: int = 1) -> None:
    """Run an open-loop load bench against the one ``--endpoint`` of ``engine``."""
    opts = engine.get("engine_options") or {}
    endpoints = list(opts.get("endpoints") or ())
    if engine.get("engine") != "openai" or len(endpoints) != 1:
        raise UsageError("--load concurrency:N|poisson:RATE needs --engine openai and one "
                         "--endpoint URL")
    prompts, source, idx = load_prompts(data, spec.num_prompts, spec.seed)
    job = LoadJob(url=endpoints[0].rstrip("/"), model=engine.get("model"), prompts=prompts,
                  prompt_source=source, prompt_indices=idx, spec=spec,
                  output_len=output_len, api=str(opts.get("api") or "completions"),
                  warmup=warmup, procs=procs)
    out = out or Path("runs") / time.strftime("load-%Y%m%d-%H%M%S")
    rec = run_load(job, out, force=force)
    m = rec["metrics"]
    Console().print(
        f"{out}: {m['completed']} requests ({m['failed']} failed) in {m['duration_s']:.2f} s, "
        f"max {rec['max_in_flight_observed']} in flight; output {m['output_throughput']:.1f} "
        f"tok/s; TTFT mean {m['ttft_ms']['mean']:.1f} ms, TPOT mean "
        f"{m['tpot_ms']['mean'] or float('nan'):.2f} ms")
