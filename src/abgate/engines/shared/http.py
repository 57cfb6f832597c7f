"""The HTTP clients abgate makes (httpx), all on one TLS context per process: httpx builds
(and loads the CA bundle into) a new one for every client otherwise, about 30 ms of CPU
each. Until 2026-12-06 only ``generate``'s clients took a shared one; discovery, tokenize,
chat render, scoring and the load bench built their own (226 contexts, 6.4 s, in one run
of the fast tier). Every client comes from here, so none can miss it."""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx

__all__ = ["async_client", "client", "tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's default TLS context (aiohttp's load client takes it too)."""
    return httpx.create_ssl_context()


def client(**kwargs: Any) -> httpx.Client:
    """``httpx.Client(**kwargs)`` on the process's TLS context."""
    return httpx.Client(verify=tls_context(), **kwargs)


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """``httpx.AsyncClient(**kwargs)`` on the process's TLS context."""
    return httpx.AsyncClient(verify=tls_context(), **kwargs)
