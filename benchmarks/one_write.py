"""An experiment for served_load_together.py: abgate's load client with each request's
writes sent as one (headers and body in one segment), to test whether httpx's two
writes (headers after two turns of the event loop, the body after a third; aiohttp
writes once, after one) are what puts abgate's TTFT above ``vllm bench serve``'s.

``install()`` makes ``bench.load_run``'s clients use it (httpcore's network-backend
seam: a stream that holds a request's writes until its first read)."""

from __future__ import annotations

from typing import Any

import httpcore
import httpx

from abgate.bench import load_run


class OneWrite(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self.inner, self.pending = inner, []  # type: ignore[var-annotated]

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self.pending.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            await self.inner.write(data, timeout)
        return await self.inner.read(max_bytes, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(self, *a: Any, **k: Any) -> httpcore.AsyncNetworkStream:
        return OneWrite(await self.inner.start_tls(*a, **k))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class Backend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, *a: Any, **k: Any) -> httpcore.AsyncNetworkStream:
        return OneWrite(await self.inner.connect_tcp(*a, **k))

    async def connect_unix_socket(self, *a: Any, **k: Any) -> httpcore.AsyncNetworkStream:
        return OneWrite(await self.inner.connect_unix_socket(*a, **k))

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def _take(self: Any) -> httpx.AsyncClient:
    if self.free:
        return self.free.pop()
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(  # the seam httpx does not expose
        max_connections=1, max_keepalive_connections=1, network_backend=Backend())
    client = httpx.AsyncClient(headers=self.headers, timeout=600.0, transport=transport)
    self.made.append(client)
    return client


_DEFAULT = load_run._Clients.take


def install(on: bool = True) -> None:
    """``bench.load_run``'s new clients one-write ones (``on``) or its own again."""
    load_run._Clients.take = _take if on else _DEFAULT  # type: ignore[method-assign]
