"""abgate's load generator and ``vllm bench serve`` against one server *at the same time*
(issue 33, item 7): a matched comparison of the two clients.

Run one after the other (``served_load.py``), the two clients meet a server whose own
speed drifts between back-to-back runs (vLLM's mean inter-token latency went from 2.3 to
3.1 ms on the H200, whichever client sent), so their ratio measured the drift. Here both
clients send at once, each keeping ``--concurrency`` requests in flight, so both meet the
same server at the same moments, and their figures are taken over the same window of
time: from the later client's first send to the earlier client's last token, less
``--margin-s`` at each end; a request counts if it was sent and finished inside it.
Each side's TTFT and TPOT are the means over its requests in the window, and its output
throughput the tokens it received inside the window per second (each request's chunks
inside, weighted by its usage tokens per chunk: vLLM packs several tokens in a chunk
when its frontend falls behind), all
computed by one function (``bench.load.serve_metrics``'s definitions) from each client's
own timestamps: abgate's raw samples, and vLLM's ``--save-detailed`` ``start_times``,
``ttfts`` and ``itls`` (both ``time.perf_counter``, the system's monotonic clock, so one
time axis). The ratio abgate / vLLM of each figure per repeat, and their median, min and
max, go to ``$OUT/served_load_together.json`` (or ``--json``). Goal: within 2% of 1.

Order within a repeat: vLLM's client starts first (it imports vLLM, about 20 s); when it
prints "Starting main benchmark run", abgate's ``bench --load concurrency:C`` starts
(its own ``--warmups`` first). Both send the same prompts in the same order (vLLM's
``--disable-shuffle``), all of them cached by one untimed pass of abgate's first.

    PYTHONPATH=src python benchmarks/served_load_together.py --url http://127.0.0.1:8011 \\
        --vllm vllm --model smol --tokenizer /root/m/smol [--concurrency 32] \\
        [--num-prompts 1280] [--repeats 3] [--client-procs 1,4] [--margin-s 1.0] \\
        [--data DATA.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from served_load import vllm_cmd  # beside this file (the script's directory is on sys.path)

from abgate.bench.load import RequestTimes, parse_load, serve_metrics
from abgate.bench.load_run import LoadJob, load_prompts, read_samples, run_load

READY = "Starting main benchmark run"
FIGURES = ("ttft_ms", "tpot_ms", "output_throughput")


def _vllm_requests(path: Path) -> list[RequestTimes]:
    """vLLM's detailed per-request record as abgate's raw samples (absolute times)."""
    r = json.loads(path.read_text())
    out = []
    for st, ttft, itls, n, err in zip(r["start_times"], r["ttfts"], r["itls"],
                                      r["output_lens"], r["errors"], strict=True):
        if err or not ttft:
            out.append(RequestTimes(False, st, (), st, 0))
            continue
        chunks = [st + ttft]
        for gap in itls:
            chunks.append(chunks[-1] + gap)
        out.append(RequestTimes(True, st, tuple(chunks), chunks[-1], int(n), chunks[-1]))
    return out


def _abgate_requests(out: Path) -> list[RequestTimes]:
    """abgate's raw samples on the same absolute clock (its record's t0 added)."""
    t0 = json.loads((out / "load.json").read_text())["t0_perf_counter"]
    return [RequestTimes(r.ok, t0 + r.t_send, tuple(t0 + c for c in r.t_chunks),
                         t0 + r.t_end, r.output_tokens,
                         None if r.t_last is None else t0 + r.t_last, r.attempts)
            for r in read_samples(out)]


def window(sides: dict[str, list[RequestTimes]], margin: float) -> tuple[float, float]:
    """From the later first send to the earlier last token, ``margin`` inside each end."""
    lo = max(min(r.t_send for r in reqs) for reqs in sides.values()) + margin
    hi = min(max(r.latency_end for r in reqs if r.ok) for reqs in sides.values()) - margin
    if hi <= lo:
        raise SystemExit(f"the two clients overlapped for {hi - lo + 2 * margin:.2f} s only")
    return lo, hi


def figures(reqs: list[RequestTimes], lo: float, hi: float, slots: int) -> dict[str, float]:
    """One side's figures over [lo, hi]: TTFT and TPOT of its requests inside; the
    output tokens it received inside per second (each request's chunks inside, weighted
    by its tokens per chunk: the usage count over the chunks streamed); and its closed
    loop's turnaround, the median time from a request's last token to the next send
    (the i-th send after the first ``slots`` follows the i-th request to finish)."""
    inside = [r for r in reqs if r.ok and r.t_send >= lo and r.latency_end <= hi]
    m = serve_metrics(inside, hi - lo)
    tokens = sum(r.output_tokens / len(r.t_chunks) * sum(1 for t in r.t_chunks if lo <= t <= hi)
                 for r in reqs if r.ok and r.t_chunks)
    ends = sorted(r.latency_end for r in reqs if r.ok)
    sends = sorted(r.t_send for r in reqs)[slots:]
    turn = sorted(1e3 * (s - e) for s, e in zip(sends, ends, strict=False))
    return {"requests": len(inside), "ttft_ms": m["ttft_ms"]["mean"],
            "tpot_ms": m["tpot_ms"]["mean"], "output_throughput": tokens / (hi - lo),
            "itl_median_ms": m["itl_ms"]["median"],
            "chunks_per_token": sum(len(r.t_chunks) for r in inside)
            / max(1, sum(r.output_tokens for r in inside)),
            "turnaround_median_ms": turn[len(turn) // 2] if turn else float("nan")}


def _drain(stream: Any, log: Any) -> None:
    for line in stream:
        log.write(line)


def _repeat(a: argparse.Namespace, r: int, procs: int, prompts: list[str], idx: list[int],
            src: str, work: Path, pf: Path) -> dict[str, Any]:
    vdir, adir = work / f"vllm-{r}", work / f"abgate-{r}"
    vdir.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"PYTHONUNBUFFERED": "1"}  # its "Starting main..." line at once
    # the same prompts in the same order as abgate's; per-request stamps kept
    cmd = vllm_cmd(a, pf, vdir, a.model) + ["--disable-shuffle", "--save-detailed"]
    with (vdir / "vllm.log").open("w") as log, \
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if READY in line:
                    break
            drain = threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True)
            drain.start()
            spec = parse_load(f"concurrency:{a.concurrency}", num_prompts=a.num_prompts,
                              seed=a.seed)
            job = LoadJob(a.url, a.model, prompts, src, idx, spec, output_len=a.output_len,
                          warmup=a.warmups, procs=procs)
            run_load(job, adir, force=True)
            if proc.wait() != 0:
                raise SystemExit(f"vllm bench serve exited {proc.returncode} "
                                 f"(see {vdir}/vllm.log)")
            drain.join()
        finally:  # abgate's side failed: vLLM's client is not left sending
            if proc.poll() is None:
                proc.kill()
    sides = {"abgate": _abgate_requests(adir), "vllm": _vllm_requests(vdir / "vllm.json")}
    lo, hi = window(sides, a.margin_s)
    row: dict[str, Any] = {"repeat": r, "client_procs": procs, "window_s": hi - lo}
    row |= {name: figures(reqs, lo, hi, a.concurrency) for name, reqs in sides.items()}
    row["ratio"] = {k: row["abgate"][k] / row["vllm"][k] for k in FIGURES}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--vllm", required=True, help="the vllm CLI")
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--tokenizer", default=None, help="vllm bench serve's --tokenizer")
    p.add_argument("--concurrency", type=int, default=32, help="each client's")
    p.add_argument("--num-prompts", type=int, default=1280, help="each client's")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--client-procs", default="1",
                   help="abgate's client processes, a comma list taken in turn per repeat")
    p.add_argument("--warmups", type=int, default=None, help="each side's (default: C)")
    p.add_argument("--margin-s", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="/work/shared/data/gsm8k/test.jsonl")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    a.url = a.url.rstrip("/")
    a.warmups = a.concurrency if a.warmups is None else a.warmups
    procs = [int(x) for x in a.client_procs.split(",")]
    prompts, src, idx = load_prompts(a.data, a.num_prompts, a.seed)
    work = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="served-together-"))
    work.mkdir(parents=True, exist_ok=True)
    pf = work / "prompts.jsonl"
    pf.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in prompts))
    spec = parse_load(f"concurrency:{a.concurrency}", num_prompts=a.num_prompts, seed=a.seed)
    run_load(LoadJob(a.url, a.model, prompts, src, idx, spec, output_len=a.output_len),
             work / "server-warmup", force=True)  # untimed: every prompt cached
    runs = [_repeat(a, r, procs[r % len(procs)], prompts, idx, src, work, pf)
            for r in range(a.repeats)]
    result = {"url": a.url, "model": a.model, "concurrency_each": a.concurrency,
              "num_prompts_each": a.num_prompts, "output_len": a.output_len,
              "warmups": a.warmups, "margin_s": a.margin_s, "prompts": src, "runs": runs,
              "ratios": {k: {"median": statistics.median(x["ratio"][k] for x in runs),
                             "min": min(x["ratio"][k] for x in runs),
                             "max": max(x["ratio"][k] for x in runs)} for k in FIGURES}}
    dest = Path(a.json) if a.json else work / "served_load_together.json"
    dest.write_text(json.dumps(result, indent=1) + "\n")
    print(dest)


if __name__ == "__main__":
    main()
