"""The load bench's HTTP client: one aiohttp session of one connection per request in
flight, as ``vllm bench serve`` sends (it uses aiohttp too), reading the stream with
the openai engine's own SSE parsing (``stream.feed``, ``stream.finished``), so a
chunk is stamped and counted as there.

Why not httpx, abgate's HTTP client elsewhere (benchmarks/load_client_cost.py measures
both): httpx's read path (httpcore, h11, anyio: two turns of the event loop per chunk)
cost 107 us of CPU per streamed chunk on the 2-core VM and 207 on the H200's host; this
client 49 and 114 (a bare aiohttp loop as vLLM's: 41 and 89). With httpx, one abgate
process at 32 streams on the H200 was busy all the time, stamping chunks late, reading
a stream's end 3.2 ms after its last token and sending the next request 3.4 ms after
that (vLLM's client: 0.45 ms in all); with this client 0.09 and 1.1 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from abgate.engines.openai.stream import (
    DRAIN_S,
    RequestFailed,
    StreamState,
    feed,
    finished,
    refused,
)
from abgate.engines.shared import http

READ_BUFSIZE = 1 << 20  # an SSE line may be this long (aiohttp refuses longer ones)


def session(headers: Mapping[str, str], *, timeout_s: float = 600.0) -> aiohttp.ClientSession:
    """A session of one kept-alive connection (made inside the event loop that uses
    it)."""
    connector = aiohttp.TCPConnector(limit=1, ssl=http.tls_context())
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    return aiohttp.ClientSession(headers=dict(headers), connector=connector, timeout=timeout,
                                 read_bufsize=READ_BUFSIZE)


async def stream(client: aiohttp.ClientSession, url: str, body: Mapping[str, Any],
                 api: str) -> StreamState:
    """POST ``body`` and read the SSE stream to its end (``stream.stream_once``'s
    contract: a failure is a ``RequestFailed``; ``unanswered`` when no response header
    came back, ``connect`` when no connection was made)."""
    state = StreamState(t_submit=time.perf_counter())
    answered = False
    try:
        async with client.post(url, json=body) as resp:
            answered = True
            if resp.status >= 400:
                raise refused(resp.status, await resp.read(), resp.headers.get("Retry-After"))
            async for raw in resp.content:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if feed(state, line, time.perf_counter(), api):
                    await _drain(resp)
                    break
    except aiohttp.ClientConnectorError as exc:
        raise RequestFailed(f"cannot connect: {exc}", transient=True, connect=True) from None
    except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors; never retried
        raise RequestFailed(f"{type(exc).__name__}: no data for the request timeout",
                            started=bool(state.chunk_times)) from None
    except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a line too long
        started = bool(state.chunk_times)
        raise RequestFailed(f"{type(exc).__name__}: {exc}".rstrip(": "),
                            transient=not started, started=started,
                            unanswered=not answered) from None
    return finished(state)


async def _drain(resp: aiohttp.ClientResponse) -> None:
    """The (normally empty) rest of the body after ``[DONE]``, so that the connection is
    kept for the next request (aiohttp closes one released with unread data); a server
    that keeps the body open is left after a moment."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with asyncio.timeout(DRAIN_S):
            while await resp.content.readany():
                pass


async def get(client: aiohttp.ClientSession, url: str) -> None:
    """One GET, its body read and its failure ignored (the priming request)."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with client.get(url) as resp:
            await resp.read()
