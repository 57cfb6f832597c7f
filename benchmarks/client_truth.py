"""Which client reports a served stream true to the server: abgate's ``bench --load``
generator and ``vllm bench serve`` against the same paced loopback server
(``client_ceiling.py``'s, streaming ``/v1/completions`` as vLLM does: one token of text
per chunk, the finish reason on the last, then usage and ``[DONE]``), whose own clock
is the ground truth.

The server notes when each request's body has been read and when it writes each
token (``perf_counter``, one clock for the host's processes). Per run the truth is
TTFT = first token written - request read; TPOT = (last token - first token) /
(tokens - 1); output tok/s = tokens / (last token written - first request read). Each
client's own report (mean TTFT, mean TPOT, output throughput, as ``served_load.py``
reads them) is divided by the truth: 1.0 is a client that adds nothing; above 1 for
TTFT/TPOT (below for throughput) is the client's own lag. Clients alternate which goes
first per repeat; no warm-up requests (their prompts would mix into the truth).

``--together``: both clients at once, as ``served_load_together.py`` sends them to the
real server (each ``--concurrency`` in flight, the same prompts in the same order; vLLM's
client's prompts carry the prefix ``"Q: "`` so that the server can tell its requests
apart). Per side and per request, the client's own stamps against the server's: how
long from the client's send stamp to the server having read the request ("send ->
read"), and from the server writing the first token to the client's first-chunk stamp
("write -> stamp"); their sum is what the client adds to TTFT. Each side's TTFT, TPOT
and throughput over the common window (``served_load_together.figures``) against the
same figures from the server's clock for the same requests: so the H200's "abgate's
TTFT reads 4-5% under vLLM's client's" can be split into what each client adds.

    PYTHONPATH=src python benchmarks/client_truth.py --vllm vllm --tokenizer /root/m/smol \\
        [--itl-ms 3] [--concurrency 32] [--num-prompts 320] [--output-len 128] [--repeats 2] \\
        [--data DATA.jsonl] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from served_load import _abgate, _vllm  # noqa: E402
from served_load_together import FIGURES, _abgate_requests, _repeat, _vllm_requests, figures, window  # noqa: E402

from abgate.bench.load_run import load_prompts  # noqa: E402


def _truth(before: dict[str, Any], after: dict[str, Any], prompts: list[str]) -> dict[str, float]:
    ttft, tpot, first_in, last_out, tokens = [], [], [], [], 0
    for p in prompts:
        came = after["arrived"][p][len(before["arrived"].get(p, [])):]
        sent = after["sent"][p][len(before["sent"].get(p, [])):]
        if len(came) != 1:
            raise SystemExit(f"prompt {p[:40]!r} came {len(came)} times in one run")
        ttft.append((sent[0] - came[0]) * 1e3)
        tpot.append((sent[-1] - sent[0]) / (len(sent) - 1) * 1e3)
        first_in.append(came[0])
        last_out.append(sent[-1])
        tokens += len(sent)
    return {"ttft_ms": statistics.fmean(ttft), "tpot_ms": statistics.fmean(tpot),
            "output_throughput": tokens / (max(last_out) - min(first_in))}


def _server_times(doc: dict[str, Any], before: dict[str, Any], prompt: str,
                  ) -> tuple[float, list[float]]:
    came = doc["arrived"][prompt][len(before["arrived"].get(prompt, [])):]
    sent = doc["sent"][prompt][len(before["sent"].get(prompt, [])):]
    if len(came) != 1:
        raise SystemExit(f"prompt {prompt[:40]!r} came {len(came)} times in one run")
    return came[0], sent


def _side_truth(reqs: list[Any], keys: list[str], before: dict[str, Any],
                after: dict[str, Any], lo: float, hi: float, slots: int) -> dict[str, Any]:
    """One side's per-request lags against the server, and the server's own figures
    for this side's requests over the window (the same function as the client's)."""
    from abgate.bench.load import RequestTimes
    lag_in, lag_out, server_side = [], [], []
    for r, key in zip(reqs, keys, strict=True):
        came, sent = _server_times(after, before, key)
        if r.ok and r.t_chunks:
            lag_in.append(1e3 * (came - r.t_send))
            lag_out.append(1e3 * (r.t_chunks[0] - sent[0]))
        server_side.append(RequestTimes(True, came, tuple(sent), sent[-1], len(sent), sent[-1]))
    med = statistics.median
    return {"send_to_read_ms": {"median": med(lag_in), "mean": statistics.fmean(lag_in)},
            "write_to_stamp_ms": {"median": med(lag_out), "mean": statistics.fmean(lag_out)},
            "server": figures(server_side, lo, hi, slots)}


def together(a: argparse.Namespace, prompts: list[str], idx: list[int], src: str,
             work: Path) -> list[dict[str, Any]]:
    """Both clients at once against the paced server; per repeat and side, the client's
    figures, the server's for the same requests, and the per-request lags."""
    a.margin_s = getattr(a, "margin_s", 1.0)
    pf = work / "prompts-vllm.jsonl"  # vLLM's side: the same prompts, told apart by a prefix
    pf.write_text("".join(json.dumps({"prompt": "Q: " + t}) + "\n" for t in prompts))
    rows = []
    for r in range(a.repeats):
        procs = int(a.client_procs.split(",")[r % len(a.client_procs.split(","))])
        before = httpx.get(a.url + "/sent", timeout=60).json()
        row = _repeat(a, r, procs, prompts, idx, src, work, pf)
        after = httpx.get(a.url + "/sent", timeout=60).json()
        sides = {"abgate": (_abgate_requests(work / f"abgate-{r}"), prompts),
                 "vllm": (_vllm_requests(work / f"vllm-{r}" / "vllm.json"),
                          ["Q: " + t for t in prompts])}
        lo, hi = window({k: v[0] for k, v in sides.items()}, a.margin_s)
        for name, (reqs, keys) in sides.items():
            row[name]["truth"] = _side_truth(reqs, keys, before, after, lo, hi, a.concurrency)
            row[name]["over_server"] = {k: row[name][k] / row[name]["truth"]["server"][k]
                                        for k in FIGURES}
        print(json.dumps({"repeat": r, "procs": procs, **{
            n: {"over_server": row[n]["over_server"],
                "send_to_read_ms": row[n]["truth"]["send_to_read_ms"]["median"],
                "write_to_stamp_ms": row[n]["truth"]["write_to_stamp_ms"]["median"]}
            for n in sides}, "ratio": row["ratio"]}), flush=True)
        rows.append(row)
    return rows


def _start_server(itl_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    port_file = Path(tempfile.mkdtemp()) / "port"
    here = Path(__file__).parent / "client_ceiling.py"
    server = subprocess.Popen([sys.executable, str(here), "--serve", str(port_file),
                               "--itl-ms", str(itl_ms)])
    while not port_file.exists() or not port_file.read_text():
        if server.poll() is not None:
            raise SystemExit("the loopback server did not start")
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port_file.read_text()}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm", default=None, help="the vllm CLI; without it abgate only")
    p.add_argument("--tokenizer", default=None, help="vllm bench serve's --tokenizer")
    p.add_argument("--itl-ms", type=float, default=3.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--num-prompts", type=int, default=320)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="/work/shared/data/gsm8k/test.jsonl")
    p.add_argument("--client-procs", default="1",
                   help="abgate's client processes, comma-separated: one abgate run each")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--together", action="store_true",
                   help="both clients at once (needs --vllm), as served_load_together.py")
    a = p.parse_args()
    a.model, a.warmups = "ceiling", 0
    server, a.url = _start_server(a.itl_ms)
    work = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="client-truth-"))
    work.mkdir(parents=True, exist_ok=True)
    prompts, src, idx = load_prompts(a.data, a.num_prompts, a.seed)
    pf = work / "prompts.jsonl"
    pf.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in prompts))
    rows: list[dict[str, Any]] = []
    try:
        if a.together:
            if not a.vllm:
                raise SystemExit("--together needs --vllm")
            rows = together(a, prompts, idx, src, work)
        for r in range(0 if a.together else a.repeats):
            sides = [f"abgate:{n}" for n in a.client_procs.split(",")]
            sides += ["vllm"] if a.vllm else []
            for side in sides if r % 2 == 0 else sides[::-1]:
                before = httpx.get(a.url + "/sent", timeout=60).json()
                a.client_procs_n = int(side.partition(":")[2] or 1)
                got = (_abgate(a, prompts, idx, src, work / f"{side}-{r}".replace(":", "-"))
                       if side != "vllm" else _vllm(a, pf, work / f"vllm-{r}", a.model))
                after = httpx.get(a.url + "/sent", timeout=60).json()
                truth = _truth(before, after, prompts)
                (work / f"server-{side}-{r}.json".replace(":", "-")).write_text(json.dumps(
                    {k: {p: after[k][p][len(before[k].get(p, [])):] for p in prompts}
                     for k in ("arrived", "sent")}))
                rows.append({"repeat": r, "client": side, "reported": got, "truth": truth,
                             "over_truth": {k: got[k] / truth[k] for k in truth}})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.kill()
        server.wait()
    doc = {"host": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]},
           "itl_ms": a.itl_ms, "concurrency": a.concurrency, "num_prompts": a.num_prompts,
           "output_len": a.output_len, "together": a.together, "rows": rows}
    (a.json or work / "client_truth.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
