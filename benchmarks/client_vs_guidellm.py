"""GuideLLM's client against the loopback server of ``client_ceiling.py``, next to
abgate's client on the same server, in the same sitting (issue 13, item 4).

For each concurrency level, each repeat: one ``guidellm run`` (``--profile
kind=concurrent,streams=C``, a fixed number of requests of ``--tokens`` output tokens,
prompts from a local JSON file, so no tokenizer is loaded and nothing is fetched), then
one batch of abgate's ``openai`` engine (``client_ceiling.measure``), both against one
server process started by ``client_ceiling.py --serve``. The server reads
``max_tokens``; GuideLLM's chat requests carry ``max_completion_tokens``, so it also
sends ``max_tokens`` through its backend ``extras``.

GuideLLM's figures: output tokens (its own count, checked against the server's) over
its own window, first request start to last request end
(``scheduler_metrics.request_{start,end}_time``), and the CPU time (user + system) of
the whole ``guidellm`` process tree (main process and scheduler workers, sampled every
20 ms from /proc through psutil, interpolated at that window), so its start-up and
report are left out. abgate's: ``client_ceiling.measure`` (wall and ``process_time`` of
its ``generate`` call).

Run from the repository root (needs abgate's deps and psutil; GuideLLM in its own venv)::

    PYTHONPATH=src python benchmarks/client_vs_guidellm.py --guidellm /tmp/glvenv/bin/guidellm \\
        [--concurrency 1,8,64,256] [--tokens 64] [--min-requests 256] [--repeats 3] [--workers N] \\
        [--json benchmarks/results/client_ceiling/vs-guidellm.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_ceiling import measure  # noqa: E402


def tree_cpu_sampler(pid: int, out: list[tuple[float, float]], stop: threading.Event,
                     last: dict[int, float]) -> None:
    """Append (time.time(), CPU seconds of pid and all its descendants) every 20 ms;
    a process that has exited keeps its last reading (in ``last``, by pid)."""
    root = psutil.Process(pid)
    while not stop.is_set():
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                t = p.cpu_times()
                last[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        out.append((time.time(), sum(last.values())))
        time.sleep(0.02)


def run_guidellm(exe: str, url: str, c: int, tokens: int, batch: int, tag: str,
                 work: Path, workers: int | None) -> dict[str, Any]:
    data = work / f"{tag}.json"
    data.write_text(json.dumps([{"prompt": f"{tag}-{i}", "output_tokens_count": tokens}
                                for i in range(batch)]))
    report = work / f"{tag}-report.json"
    backend = {"kind": "openai_http", "target": url, "model": "ceiling",
               "extras": {"body": {"max_tokens": tokens}}}
    cmd = [exe, "run", "--backend", json.dumps(backend),
           "--profile", f"kind=concurrent,streams={c}",
           "--data", f"kind=json_file,path={data}",
           "--constraint", f"kind=max_requests,count={batch}",
           "--output", f"kind=json,path={report}", "--disable-console"]
    samples: list[tuple[float, float]] = []
    stop, last = threading.Event(), {}
    env = dict(os.environ)
    if workers:
        env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(workers)
    with open(work / f"{tag}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=env)
        sampler = threading.Thread(target=tree_cpu_sampler,
                                   args=(proc.pid, samples, stop, last))
        sampler.start()
        try:
            rc = proc.wait(timeout=600)
        finally:
            stop.set()
            sampler.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if rc != 0:
        raise SystemExit(f"guidellm exited {rc}; see {work / (tag + '.log')}")
    bench = json.loads(report.read_text())["benchmarks"][0]
    sm, metrics = bench["scheduler_metrics"], bench["metrics"]
    made = sm["requests_made"]
    if made["successful"] != batch:
        raise SystemExit(f"guidellm: {made} requests, {batch} asked")
    n_tok = int(metrics["output_token_count"]["successful"]["total_sum"])
    sent = httpx.get(url + "/sent", timeout=60).json()["sent"]
    server_tok = sum(len(v) for k, v in sent.items() if f"'{tag}-" in k)
    if n_tok != batch * tokens or server_tok != n_tok:
        raise SystemExit(f"guidellm counted {n_tok} tokens, the server sent {server_tok}")
    t0, t1 = sm["request_start_time"], sm["request_end_time"]
    ts, cpu = np.array([s[0] for s in samples]), np.array([s[1] for s in samples])
    window_cpu = float(np.interp(t1, ts, cpu) - np.interp(t0, ts, cpu))
    return {"concurrency": c, "requests": batch, "tokens": n_tok, "wall_s": t1 - t0,
            "tok_s": n_tok / (t1 - t0), "cpu_us_per_token": window_cpu / n_tok * 1e6,
            "total_cpu_s": float(cpu[-1]), "processes": len(last),
            "samples_in_window": int(((ts >= t0) & (ts <= t1)).sum()),
            "guidellm_reported_output_tok_s":
                metrics["output_tokens_per_second"]["successful"]["mean"]}


def mid(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--guidellm", default="/tmp/glvenv/bin/guidellm")
    ap.add_argument("--concurrency", default="1,8,64,256")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--min-requests", type=int, default=256,
                    help="requests per batch: max(this, 4 x concurrency)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int,
                    help="GuideLLM's worker processes at most (default: its own, up to 10)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="glvs-"))
    port_file = work / "port"
    server = subprocess.Popen([sys.executable, str(Path(__file__).parent / "client_ceiling.py"),
                               "--serve", str(port_file)])
    rows = []
    try:
        while not port_file.exists() or not port_file.read_text():
            if server.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        for c in (int(x) for x in a.concurrency.split(",")):
            batch = max(a.min_requests, 4 * c)
            measure(url, c, a.tokens, min(batch, 64), f"warm{c}")
            gl, ab, loads = [], [], []
            for k in range(a.repeats):  # interleaved: GuideLLM, then abgate
                loads.append(os.getloadavg()[0])
                gl.append(run_guidellm(a.guidellm, url, c, a.tokens, batch, f"gl{c}r{k}", work,
                                       a.workers))
                ab.append(measure(url, c, a.tokens, batch, f"ab{c}r{k}"))
            row = {"concurrency": c, "requests": batch, "tokens": batch * a.tokens,
                   "repeats": a.repeats, "load_1min": mid(loads),
                   "guidellm_max_worker_processes": a.workers,
                   "guidellm": {"tok_s": mid([r["tok_s"] for r in gl]),
                                "cpu_us_per_token": mid([r["cpu_us_per_token"] for r in gl]),
                                "runs": gl},
                   "abgate": {"tok_s": mid([r["tok_s"] for r in ab]),
                              "cpu_us_per_token": mid([r["cpu_us_per_token"] for r in ab]),
                              "runs": [{k: r[k] for k in ("tok_s", "cpu_us_per_token", "wall_s",
                                                         "connections")} for r in ab]},
                   # per repeat (GuideLLM and abgate run back to back), abgate / GuideLLM
                   "ratio_tok_s": mid([b["tok_s"] / g["tok_s"]
                                       for b, g in zip(ab, gl, strict=True)]),
                   "ratio_cpu_per_token": mid([
                       b["cpu_us_per_token"] / g["cpu_us_per_token"]
                       for b, g in zip(ab, gl, strict=True)])}
            rows.append(row)
            g, b = row["guidellm"], row["abgate"]
            print(f"c={c:>3} {batch} req x {a.tokens} tok (load {loads[0]:.1f}): "
                  f"GuideLLM {g['tok_s']['median']:.0f} tok/s, "
                  f"{g['cpu_us_per_token']['median']:.1f} us CPU/tok; abgate "
                  f"{b['tok_s']['median']:.0f} tok/s, {b['cpu_us_per_token']['median']:.1f} "
                  f"us CPU/tok; ratio tok/s {row['ratio_tok_s']['median']:.2f} "
                  f"({row['ratio_tok_s']['min']:.2f}-{row['ratio_tok_s']['max']:.2f}), "
                  f"CPU/tok {row['ratio_cpu_per_token']['median']:.2f} "
                  f"({row['ratio_cpu_per_token']['min']:.2f}-"
                  f"{row['ratio_cpu_per_token']['max']:.2f})", flush=True)
    finally:
        server.kill()
        server.wait()
    if a.json:
        version = subprocess.run([a.guidellm, "--version"], capture_output=True, text=True)
        host = {"cpus": os.cpu_count(), "load_1min_end": os.getloadavg()[0],
                "python": sys.version.split()[0], "guidellm": version.stdout.strip()}
        a.json.write_text(json.dumps({"host": host, "tokens_per_request": a.tokens,
                                      "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
