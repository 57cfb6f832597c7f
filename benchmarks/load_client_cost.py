"""CPU per streamed chunk of the load bench's client, against the openai engine's
httpx stream and a bare aiohttp loop as ``vllm bench serve`` reads (bench/load_http.py
says why the load bench left httpx).

A server in a process of its own streams one long completion of vLLM-shaped SSE
chunks, each written on its own after a short sleep, so the client reads them one at
a time as it does at load; this process's CPU time (``time.process_time``) over the
stream, divided by the chunks, is each client's cost per chunk. ``raw`` reads the same
bytes with bare asyncio streams: the floor (the event loop, the socket).

    PYTHONPATH=src python benchmarks/load_client_cost.py [--chunks 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import time

import aiohttp
import httpx

from abgate.bench import load_http
from abgate.engines.openai.stream import stream_once

_CHOICE = {"index": 0, "text": " the", "logprobs": None, "finish_reason": None,
           "stop_reason": None}
_CHUNK = {"id": "cmpl-bench-0-0", "object": "text_completion", "created": 1733250000,
          "model": "smol", "choices": [_CHOICE], "usage": None}


def _frame(doc: object) -> bytes:
    data = b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _serve(port: mp.Value, n: int, gap_s: float) -> None:  # type: ignore[type-arg]
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await r.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed its connection
            length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n")
                           if h.lower().startswith(b"content-length")), 0)
            await r.readexactly(length)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n")
            one = _frame(_CHUNK)
            for _ in range(n - 1):
                w.write(one)
                await w.drain()
                await asyncio.sleep(gap_s)
            last = _CHUNK | {"choices": [_CHOICE | {"finish_reason": "length"}]}
            usage = _CHUNK | {"choices": [], "usage": {"prompt_tokens": 1,
                                                       "completion_tokens": n}}
            w.write(_frame(last) + _frame(usage) + _frame(b"[DONE]") + b"0\r\n\r\n")
            await w.drain()

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.value = srv.sockets[0].getsockname()[1]
        await asyncio.sleep(3600)

    asyncio.run(main())


async def _raw(url: str, n: int) -> None:
    host, port = url.split("//")[1].split("/")[0].split(":")
    r, w = await asyncio.open_connection(host, int(port))
    w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    while not (await r.read(65536)).endswith(b"0\r\n\r\n"):
        pass
    w.close()


async def _httpx(url: str, n: int) -> None:
    async with httpx.AsyncClient(timeout=60) as c:
        st = await stream_once(c, url, {"max_tokens": n}, "completions")
    assert len(st.chunk_times) == n


async def _load_http(url: str, n: int) -> None:
    async with load_http.session({}) as c:
        st = await load_http.stream(c, url, {"max_tokens": n}, "completions")
    assert len(st.chunk_times) == n


async def _aiohttp_bare(url: str, n: int) -> None:
    seen = 0
    async with aiohttp.ClientSession() as s, s.post(url, json={}) as resp:
        async for raw in resp.content.iter_any():
            for msg in raw.split(b"\n\n"):
                msg = msg.strip()
                if msg.startswith(b"data: {"):
                    json.loads(msg[6:])
                    seen += 1
    assert seen == n + 1  # the usage chunk too


CLIENTS = {"raw asyncio (floor)": _raw, "httpx stream_once (openai engine)": _httpx,
           "load_http.stream (bench --load)": _load_http,
           "bare aiohttp loop (as vllm bench serve)": _aiohttp_bare}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gap-ms", type=float, default=0.2, help="the server's sleep per chunk")
    a = p.parse_args()
    port = mp.get_context("spawn").Value("i", 0)
    server = mp.get_context("spawn").Process(target=_serve, args=(port, a.chunks,
                                                                  a.gap_ms / 1e3), daemon=True)
    server.start()
    while not port.value:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port.value}/v1/completions"
    try:
        for name, fn in CLIENTS.items():
            us = []
            for _ in range(a.repeats):
                t = time.process_time()
                asyncio.run(fn(url, a.chunks))
                us.append((time.process_time() - t) / a.chunks * 1e6)
            print(f"{name:42s} {statistics.median(us):6.1f} us CPU per chunk "
                  f"(min {min(us):.1f}, max {max(us):.1f}, {a.repeats} runs)")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
