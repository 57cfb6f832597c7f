"""abgate's served load shape against ``vllm bench serve`` on one server (issue 33, item 7).

First one untimed pass of every prompt through abgate's generator (the server's
CUDA graphs, caches and prefix cache warmed before anything is measured; both sides
then find the same prompts cached). Then per repeat, in alternating order (abgate first
in even repeats, vLLM first in odd ones): abgate's ``bench --load concurrency:C``
generator (``bench.load_run``, ``--warmups`` requests before its clock starts) and
``vllm bench serve`` (``--backend openai`` to ``/v1/completions``, request rate inf,
``--max-concurrency C``, the same prompts in a ``--dataset-name custom`` JSON Lines
file with the chat template skipped, ``--ignore-eos``, ``--temperature 0`` as abgate
sends, ``--num-warmups`` the same), both against the server at ``--url``. Written to
``$OUT/served_load.json`` (or ``--json``): per repeat both sides' mean TTFT, mean TPOT,
output throughput and median ITL, and the ratios abgate / vLLM with their median, min
and max over the repeats. Goal: every ratio within 2% of 1. With ``--server-metrics``
also the server's own view of each side (vLLM's ``/metrics`` before and after it: mean
TTFT, ITL, TPOT, queue, prefill and decode time as the server measured them, and its
token counters) and those ratios: whether the server itself served one side faster.

Without ``--vllm`` only abgate's side runs (a smoke test, e.g. against
llama_cpp.server or llama-server here)::

    PYTHONPATH=src python benchmarks/served_load.py --url http://127.0.0.1:8000 \\
        [--vllm vllm] [--model M] [--concurrency 32] [--num-prompts 320] \\
        [--output-len 128] [--repeats 3] [--warmups 32] \\
        [--data /work/shared/data/gsm8k/test.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from abgate.bench.load import parse_load
from abgate.bench.load_run import LoadJob, load_prompts, run_load


def _abgate(a: argparse.Namespace, prompts: list[str], idx: list[int], src: str,
            out: Path) -> dict[str, float]:
    spec = parse_load(f"concurrency:{a.concurrency}", num_prompts=a.num_prompts, seed=a.seed)
    job = LoadJob(a.url, a.model, prompts, src, idx, spec, output_len=a.output_len,
                  warmup=a.warmups, procs=getattr(a, "client_procs_n", a.client_procs))
    m = run_load(job, out, force=True)["metrics"]
    return {"ttft_ms": m["ttft_ms"]["mean"], "tpot_ms": m["tpot_ms"]["mean"],
            "output_throughput": m["output_throughput"], "itl_median_ms": m["itl_ms"]["median"]}


def vllm_cmd(a: argparse.Namespace, prompts_file: Path, out: Path, model: str) -> list[str]:
    """``vllm bench serve`` against ``a.url`` with the prompts of ``prompts_file``, its
    result written to ``out/vllm.json``."""
    cmd = [a.vllm, "bench", "serve", "--backend", "openai", "--base-url", a.url,
           "--endpoint", "/v1/completions", "--model", model,
           "--dataset-name", "custom", "--dataset-path", str(prompts_file),
           "--custom-output-len", str(a.output_len), "--skip-chat-template",
           "--num-prompts", str(a.num_prompts), "--max-concurrency", str(a.concurrency),
           "--request-rate", "inf", "--ignore-eos", "--seed", str(a.seed),
           "--temperature", "0", "--num-warmups", str(a.warmups),
           "--save-result", "--result-dir", str(out), "--result-filename", "vllm.json"]
    if a.tokenizer:  # the served name is no hub id (nothing can be fetched on the device)
        cmd += ["--tokenizer", a.tokenizer]
    return cmd


def _vllm(a: argparse.Namespace, prompts_file: Path, out: Path, model: str) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(vllm_cmd(a, prompts_file, out, model), check=True)
    r = json.loads((out / "vllm.json").read_text())
    return {"ttft_ms": r["mean_ttft_ms"], "tpot_ms": r["mean_tpot_ms"],
            "output_throughput": r["output_throughput"], "itl_median_ms": r["median_itl_ms"]}


# The server's own view (vLLM's Prometheus /metrics: histogram sums and counts, counters),
# read before and after each side: what the server measured while serving that side's
# requests (its warm-up requests included, the same number on both sides). If the server
# itself served one side faster, the cause is in the requests, not in the clients' clocks.
_HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds",
               "request_time_per_output_token_seconds", "e2e_request_latency_seconds",
               "request_queue_time_seconds", "request_prefill_time_seconds",
               "request_decode_time_seconds")
_COUNTERS = ("generation_tokens_total", "prompt_tokens_total", "prefix_cache_hits_total",
             "prefix_cache_queries_total", "num_preemptions_total")


def _scrape(url: str) -> dict[str, float]:
    import httpx
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0].removeprefix("vllm:")
        try:
            out[base] = out.get(base, 0.0) + float(value)  # summed over label sets
        except ValueError:
            continue
    return out


def _served(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    view = {f"{h}_mean_ms": 1000 * d.get(f"{h}_sum", 0.0) / d[f"{h}_count"]
            for h in _HISTOGRAMS if d.get(f"{h}_count")}
    return view | {c: d.get(c, 0.0) for c in _COUNTERS}


def _side(a: argparse.Namespace, run: Any) -> dict[str, Any]:
    """One side's client figures, with the server's own view when it has /metrics."""
    before = _scrape(a.url) if a.server_metrics else {}
    figures = dict(run())
    if a.server_metrics:
        figures["server"] = _served(before, _scrape(a.url))
    return figures


def _repeat(a: argparse.Namespace, r: int, prompts: list[str], idx: list[int], src: str,
            work: Path, pf: Path, model: str) -> dict[str, Any]:
    """One repeat: both sides, abgate first when ``r`` is even, vLLM first when odd."""
    row: dict[str, Any] = {"repeat": r, "first": "vllm" if a.vllm and r % 2 else "abgate"}
    def vllm() -> dict[str, float]:
        return _vllm(a, pf, work / f"vllm-{r}", model)

    def abgate() -> dict[str, float]:
        return _abgate(a, prompts, idx, src, work / f"abgate-{r}")

    if row["first"] == "vllm":
        row["vllm"] = _side(a, vllm)
    row["abgate"] = _side(a, abgate)
    if a.vllm and "vllm" not in row:
        row["vllm"] = _side(a, vllm)
    if a.vllm:
        row["ratio"] = {k: row["abgate"][k] / row["vllm"][k] for k in row["vllm"]
                        if k != "server"}
        if a.server_metrics:
            mine, theirs = row["abgate"]["server"], row["vllm"]["server"]
            row["server_ratio"] = {k: mine[k] / theirs[k] for k in mine
                                   if k.endswith("_ms") and theirs.get(k)}
    print(json.dumps(row), flush=True)
    return row


def _served_model(url: str) -> str:
    import httpx
    return str(httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--vllm", default=None, help="the vllm CLI; without it abgate only")
    p.add_argument("--model", default=None)
    p.add_argument("--tokenizer", default=None, help="vllm bench serve's --tokenizer")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--num-prompts", type=int, default=320)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--client-procs", type=int, default=1,
                   help="abgate's client processes (bench --load --client-procs)")
    p.add_argument("--warmups", type=int, default=None,
                   help="requests each side sends before its clock starts (default: C)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="/work/shared/data/gsm8k/test.jsonl")
    p.add_argument("--json", default=None)
    p.add_argument("--server-metrics", action="store_true",
                   help="also read the server's /metrics (vLLM) before and after each side")
    a = p.parse_args()
    a.url = a.url.rstrip("/")
    if a.warmups is None:
        a.warmups = a.concurrency
    if a.warmups < 0 or a.repeats < 1 or a.concurrency < 1:
        raise SystemExit("--warmups must be >= 0, --repeats and --concurrency >= 1")
    model = a.model or _served_model(a.url)
    prompts, src, idx = load_prompts(a.data, a.num_prompts, a.seed)
    work = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="served-load-"))
    work.mkdir(parents=True, exist_ok=True)
    pf = work / "prompts.jsonl"
    pf.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in prompts))
    warm = _abgate(a, prompts, idx, src, work / "server-warmup")  # untimed: the server's
    print(json.dumps({"server_warmup": warm}), flush=True)
    runs = [_repeat(a, r, prompts, idx, src, work, pf, model) for r in range(a.repeats)]
    result: dict[str, Any] = {"url": a.url, "model": model, "concurrency": a.concurrency,
                              "num_prompts": a.num_prompts, "output_len": a.output_len,
                              "warmups": a.warmups, "prompts": src, "server_warmup": warm,
                              "runs": runs}
    if a.vllm:
        result["ratios"] = {k: {"median": statistics.median(x["ratio"][k] for x in runs),
                                "min": min(x["ratio"][k] for x in runs),
                                "max": max(x["ratio"][k] for x in runs)}
                            for k in ("ttft_ms", "tpot_ms", "output_throughput")}
        if a.server_metrics:
            keys = set.intersection(*(set(x["server_ratio"]) for x in runs))
            result["server_ratios"] = {
                k: {"median": statistics.median(x["server_ratio"][k] for x in runs),
                    "min": min(x["server_ratio"][k] for x in runs),
                    "max": max(x["server_ratio"][k] for x in runs)} for k in sorted(keys)}
    dest = Path(a.json) if a.json else work / "served_load.json"
    dest.write_text(json.dumps(result, indent=1) + "\n")
    print(dest)


if __name__ == "__main__":
    main()
