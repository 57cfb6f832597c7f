"""The ceiling of abgate's own OpenAI-compatible client: how many streamed tokens per
second it can take in, what each costs it in CPU, and whether its token timestamps
stay true to when the server sent them, at concurrency 1, 8, 64 and 256.

The server is a separate process on loopback that streams pre-made tokens as fast as
it can (one token per SSE chunk, keep-alive, chunked encoding, no model and no sleep)
and notes ``time.perf_counter()`` just before it writes each chunk. On Linux
``perf_counter`` is ``CLOCK_MONOTONIC``, one clock for every process on the host, so
the client's per-token timestamps (``GenerationResult.token_times``) and the server's
send times can be subtracted: the **lag** is how late abgate stamps a token after the
server handed it to the kernel (loopback transfer, event-loop queueing, parsing).

Measured per concurrency level (each level ``--repeats`` times; median and min-max):
sustained output tokens/s over the whole batch (wall clock), client CPU per token
(``time.process_time`` of the client process over the batch, all threads, divided by
the tokens), and the lag's median, p99 and max.

``--itl-ms N`` paces every stream at one token per N ms instead (a model's decode
rate), to see whether the timestamps hold at a load the client can keep up with.

Run from the repository root (the server takes one core; the figures are this host's)::

    PYTHONPATH=src python benchmarks/client_ceiling.py [--tokens 64] [--repeats 3] \\
        [--concurrency 1,8,64,256] [--itl-ms 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# -- the server -------------------------------------------------------------------------

SENT: dict[str, list[float]] = {}
ARRIVED: dict[str, list[float]] = {}  # when each request's body had been read
CONNECTIONS = [0]
ITL_S = [0.0]  # the server's pause between two tokens of a stream (0: none)


async def _serve_one(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    CONNECTIONS[0] += 1
    try:
        while True:  # keep-alive: requests one after another on this connection
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            method, path = head.split(" ", 2)[:2]
            length = re.search(r"(?im)^content-length:\s*(\d+)", head)
            raw = await reader.readexactly(int(length.group(1))) if length else b""
            if method == "GET":
                doc: Any = {"data": [{"id": "ceiling", "owned_by": "vllm"}]} \
                    if path == "/v1/models" else \
                    {"sent": SENT, "arrived": ARRIVED, "connections": CONNECTIONS[0],
                     "cpu_s": time.process_time()} if path == "/sent" else {}
                body = json.dumps(doc).encode()
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                await w.drain()
                continue
            await _stream(w, json.loads(raw))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        w.close()


async def _stream(w: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    n = int(body["max_tokens"])
    chat = "messages" in body
    rid = str(body["messages"][0]["content"]) if chat else str(body["prompt"])
    ARRIVED.setdefault(rid, []).append(time.perf_counter())
    times = SENT.setdefault(rid, [])
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")

    def chunk(data: bytes) -> bytes:
        payload = b"data: " + data + b"\n\n"
        return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"

    if not chat:  # /v1/completions as vLLM streams it: the text, the finish reason on the last
        await _complete(w, n, times, chunk)
        return
    pre = [chunk(json.dumps({"choices": [{"index": 0, "token_ids": [100 + i],
                                          "delta": {"content": f"t{i} "},
                                          "finish_reason": None}]}).encode())
           for i in range(n)]
    w.write(chunk(json.dumps({"prompt_token_ids": [1, 2, 3], "choices": [
        {"index": 0, "delta": {"role": "assistant"}}]}).encode()))
    for piece in pre:
        if ITL_S[0]:
            await asyncio.sleep(ITL_S[0])
        times.append(time.perf_counter())
        w.write(piece)
        await w.drain()
    w.write(chunk(json.dumps({"choices": [{"index": 0, "delta": {},
                                           "finish_reason": "length"}]}).encode()))
    w.write(chunk(json.dumps({"choices": [], "usage": {"prompt_tokens": 3,
                                                       "completion_tokens": n}}).encode()))
    w.write(chunk(b"[DONE]") + b"0\r\n\r\n")
    await w.drain()


async def _complete(w: asyncio.StreamWriter, n: int, times: list[float], chunk: Any) -> None:
    for i in range(n):
        doc = {"id": "cmpl-ceiling", "object": "text_completion", "model": "ceiling",
               "choices": [{"index": 0, "text": f" t{i}", "logprobs": None,
                            "finish_reason": "length" if i == n - 1 else None,
                            "stop_reason": None}], "usage": None}
        if ITL_S[0]:
            await asyncio.sleep(ITL_S[0])
        times.append(time.perf_counter())
        w.write(chunk(json.dumps(doc).encode()))
        await w.drain()
    w.write(chunk(json.dumps({"id": "cmpl-ceiling", "choices": [], "usage": {
        "prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}}).encode()))
    w.write(chunk(b"[DONE]") + b"0\r\n\r\n")
    await w.drain()


def serve(port_file: Path, itl_s: float) -> None:
    ITL_S[0] = itl_s

    async def main() -> None:
        server = await asyncio.start_server(_serve_one, "127.0.0.1", 0, backlog=1024)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(main())


# -- the client (abgate's openai engine) -------------------------------------------------


def measure(url: str, concurrency: int, tokens: int, batch: int, tag: str) -> dict[str, Any]:
    import httpx

    from abgate.engines.base import GenerationRequest, SamplingParams
    from abgate.engines.openai import engine as openai_compat

    engine = openai_compat.load("", {}, {"endpoints": [url], "concurrency": concurrency,
                                         "request_timeout": 600.0})
    before = httpx.get(url + "/sent", timeout=60).json()
    reqs = [GenerationRequest(id=str(i), params=SamplingParams(max_tokens=tokens),
                              messages=({"role": "user", "content": f"{tag}-{i}"},))
            for i in range(batch)]
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        results = engine.generate(reqs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        engine.close()
    doc = httpx.get(url + "/sent", timeout=60).json()
    sent, connections = doc["sent"], doc["connections"] - before["connections"] - 1
    server_cpu = doc["cpu_s"] - before["cpu_s"]
    bad = [r.error for r in results if r.finish_reason != "length"]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed, e.g. {bad[0]}")
    lags, disordered = [], 0
    for r in results:
        server_t = sent[f"{tag}-{r.request_id}"]
        client_t = r.token_times or []
        if len(server_t) != len(client_t):
            raise SystemExit(f"request {r.request_id}: {len(server_t)} sent, "
                             f"{len(client_t)} stamped")
        lags += [c - s for c, s in zip(client_t, server_t, strict=True)]
        disordered += sum(b < a for a, b in zip(client_t, client_t[1:], strict=False))
    n_tok = sum(r.output_tokens for r in results)
    lag = np.asarray(lags) * 1e3
    return {"concurrency": concurrency, "requests": batch, "tokens": n_tok,
            "wall_s": wall, "tok_s": n_tok / wall, "cpu_us_per_token": cpu / n_tok * 1e6,
            "server_cpu_us_per_token": server_cpu / n_tok * 1e6,
            "lag_ms": {"median": float(np.median(lag)), "p99": float(np.percentile(lag, 99)),
                       "max": float(lag.max()), "min": float(lag.min())},
            "negative_lags": int((lag < 0).sum()), "out_of_order": disordered,
            "connections": connections}


def measure_load(url: str, concurrency: int, tokens: int, batch: int, tag: str,
                 out_root: Path, warmup: int = 0) -> dict[str, Any]:
    """As :func:`measure`, through ``bench --load concurrency:C``'s generator
    (``bench.load_run``: its own samples file, its own clock origin)."""
    import httpx

    from abgate.bench.load import parse_load
    from abgate.bench.load_run import LoadJob, read_samples, run_load

    spec = parse_load(f"concurrency:{concurrency}", num_prompts=batch)
    prompts = [f"{tag}-{i}" for i in range(batch)]
    job = LoadJob(url, None, prompts, "client_ceiling", list(range(batch)), spec,
                  output_len=tokens, warmup=warmup)
    out = out_root / tag
    before = httpx.get(url + "/sent", timeout=60).json()
    cpu0 = time.process_time()
    rec = run_load(job, out, force=True)
    cpu = time.process_time() - cpu0
    doc = httpx.get(url + "/sent", timeout=60).json()
    t0, reqs = rec["t0_perf_counter"], read_samples(out)
    lags = [t0 + c - s for i, r in enumerate(reqs)
            for c, s in zip(r.t_chunks, doc["sent"][prompts[i]], strict=True)]
    m, lag = rec["metrics"], np.asarray(lags) * 1e3
    n_tok = m["total_output_tokens"]
    return {"concurrency": concurrency, "requests": batch, "tokens": n_tok,
            "wall_s": m["duration_s"], "tok_s": m["output_throughput"],
            "cpu_us_per_token": cpu / n_tok * 1e6,
            "server_cpu_us_per_token": (doc["cpu_s"] - before["cpu_s"]) / n_tok * 1e6,
            "lag_ms": {"median": float(np.median(lag)), "p99": float(np.percentile(lag, 99)),
                       "max": float(lag.max()), "min": float(lag.min())},
            "negative_lags": int((lag < 0).sum()), "out_of_order": 0,
            "connections": doc["connections"] - before["connections"] - 1,
            "ttft_ms_mean": m["ttft_ms"]["mean"], "tpot_ms_mean": m["tpot_ms"]["mean"]}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def mid(get: Any) -> dict[str, float]:
        xs = [get(r) for r in runs]
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return {"concurrency": runs[0]["concurrency"], "requests": runs[0]["requests"],
            "tokens": runs[0]["tokens"], "repeats": len(runs),
            "tok_s": mid(lambda r: r["tok_s"]),
            "cpu_us_per_token": mid(lambda r: r["cpu_us_per_token"]),
            "server_cpu_us_per_token": mid(lambda r: r["server_cpu_us_per_token"]),
            "lag_median_ms": mid(lambda r: r["lag_ms"]["median"]),
            "lag_p99_ms": mid(lambda r: r["lag_ms"]["p99"]),
            "lag_max_ms": mid(lambda r: r["lag_ms"]["max"]),
            "negative_lags": sum(r["negative_lags"] for r in runs),
            "out_of_order": sum(r["out_of_order"] for r in runs),
            "connections": max(r["connections"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", default="1,8,64,256")
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    ap.add_argument("--min-requests", type=int, default=32,
                    help="requests per batch: max(this, 4 x concurrency)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--itl-ms", type=float, default=0.0,
                    help="pace each stream at one token per this many ms (default: flat out)")
    ap.add_argument("--client", choices=("engine", "load"), default="engine",
                    help="the openai engine's generate (default) or bench --load's generator")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve, a.itl_ms / 1e3)
    port_file = Path(tempfile.mkdtemp()) / "port"
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file),
                               "--itl-ms", str(a.itl_ms)])
    try:
        while not port_file.exists() or not port_file.read_text():
            if server.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        rows, tmp = [], Path(tempfile.mkdtemp(prefix="ceiling-load-"))

        def one(c: int, batch: int, tag: str) -> dict[str, Any]:
            if a.client == "load":
                return measure_load(url, c, a.tokens, batch, tag, tmp)
            return measure(url, c, a.tokens, batch, tag)

        for c in (int(x) for x in a.concurrency.split(",")):
            batch = max(a.min_requests, 4 * c)
            one(c, min(batch, 64), f"warm{c}")  # connections, imports
            runs = [one(c, batch, f"c{c}r{k}") for k in range(a.repeats)]
            rows.append(summarize(runs))
            s = rows[-1]
            print(f"c={c:>3} {s['requests']:>4} req x {a.tokens} tok: "
                  f"{s['tok_s']['median']:>8.0f} tok/s ({s['tok_s']['min']:.0f}-"
                  f"{s['tok_s']['max']:.0f}), {s['cpu_us_per_token']['median']:.1f} us CPU/tok "
                  f"(server {s['server_cpu_us_per_token']['median']:.1f}), "
                  f"lag median {s['lag_median_ms']['median']:.2f} ms, p99 "
                  f"{s['lag_p99_ms']['median']:.2f} ms, max {s['lag_max_ms']['median']:.1f} ms, "
                  f"negative {s['negative_lags']}, out of order {s['out_of_order']}, "
                  f"connections {s['connections']}", flush=True)
    finally:
        server.kill()
        server.wait()
    if a.json:
        host = {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0],
                "python": sys.version.split()[0]}
        a.json.write_text(json.dumps({"host": host, "client": a.client,
                                      "tokens_per_request": a.tokens,
                                      "itl_ms": a.itl_ms, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
