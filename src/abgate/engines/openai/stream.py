"""One streamed request to an OpenAI-compatible server, and what each server speaks.

The request body carries every sampling parameter explicitly (servers have their own
defaults: llama_cpp.server applies ``repeat_penalty=1.1``, ``top_k=40``,
``min_p=0.05`` and ``temperature=0.8`` unless told otherwise). Each SSE chunk that
carries output gets a ``perf_counter`` timestamp when its line arrives; a chunk may
carry more than one token. Usage comes from ``stream_options.include_usage`` (the
usage chunk follows the finish chunk, so the stream is read to ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.engines.openai.checks import retry_after
from abgate.engines.shared import http
from abgate.errors import AbgateError, UsageError
from abgate.safejson import BadJson, parse

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Dialect:
    """What one server kind accepts and returns, as far as abgate relies on it."""

    kind: str
    top_k_off: int  # the value that disables top-k
    token_ids: str  # how output token IDs are obtained, or why not
    extra: Mapping[str, Any] = field(default_factory=dict)  # sent with every request
    ignore_eos: bool = True  # honours ignore_eos
    token_id_prompts: bool = True  # /v1/completions takes a prompt of token IDs
    # a request field that isolates each request's prefix cache (a fresh value per
    # request), so no measured TTFT is a cache hit on an earlier request's prompt
    cache_salt: str | None = None


DIALECTS: Mapping[str, Dialect] = {
    "vllm": Dialect("vllm", -1, "return_token_ids (vLLM >= 0.10.2; older versions omit them)",
                    {"return_token_ids": True}, cache_salt="cache_salt"),
    "sglang": Dialect("sglang", -1, "not returned by its OpenAI API"),
    "llama.cpp": Dialect("llama.cpp", 0, "not returned by its OpenAI API"),
    "llama-cpp-python": Dialect("llama-cpp-python", 0, "not returned (no such field)",
                                ignore_eos=False, token_id_prompts=False),
    "unknown": Dialect("unknown", -1, "only if the server sends token_ids"),
}


def identify(models: Mapping[str, Any], openapi_title: str | None) -> Dialect:
    """The server kind, from ``/v1/models``' ``owned_by`` and the OpenAPI title."""
    owners = {str(m.get("owned_by", "")).lower() for m in models.get("data", [])}
    if "vllm" in owners:
        return DIALECTS["vllm"]
    if "sglang" in owners:
        return DIALECTS["sglang"]
    if "llamacpp" in owners:
        return DIALECTS["llama.cpp"]
    if openapi_title and "llama.cpp python" in openapi_title.lower():
        return DIALECTS["llama-cpp-python"]
    return DIALECTS["unknown"]


FIXED_SAMPLING: Mapping[str, Any] = {
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,  # llama.cpp servers
    "repetition_penalty": 1.0,  # vLLM, SGLang
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "mirostat_mode": 0,
    "n": 1,
}


def sampling_body(p: SamplingParams, dialect: Dialect) -> dict[str, Any]:
    """Every sampling parameter, explicit, in the server's terms."""
    return {
        "max_tokens": p.max_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k if p.top_k > 0 else dialect.top_k_off,
        "seed": p.seed,
        "stop": list(p.stop),
        "ignore_eos": p.ignore_eos,
        **FIXED_SAMPLING,
    }


def request_body(req: GenerationRequest, api: str, model: str,
                 dialect: Dialect) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if api == "chat":
        body["messages"] = [dict(m) for m in req.messages or ()]
    else:
        body["prompt"] = req.prompt if req.prompt is not None else list(req.prompt_token_ids or ())
    body |= sampling_body(req.params, dialect)
    body |= {"stream": True, "stream_options": {"include_usage": True}, **dialect.extra}
    if dialect.cache_salt:
        body[dialect.cache_salt] = uuid.uuid4().hex
    return body


class RequestFailed(Exception):
    """One attempt failed. ``transient``: worth retrying; ``started``: output had
    arrived (never retried); ``connect``: the server could not be reached at all;
    ``answered``: the server replied with an HTTP error status (so it is alive);
    ``unanswered``: the connection failed before any response header came back (a
    kept-alive connection the server closed as the client reused it)."""

    def __init__(self, message: str, *, transient: bool = False, started: bool = False,
                 connect: bool = False, retry_after: float | None = None,
                 answered: bool = False, unanswered: bool = False) -> None:
        super().__init__(message)
        self.transient, self.started, self.connect = transient, started, connect
        self.answered, self.unanswered = answered, unanswered
        self.retry_after = retry_after  # seconds the server asked to wait (Retry-After)


@dataclass
class StreamState:
    """What one streamed attempt produced."""

    t_submit: float
    parts: list[str] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    finish: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False
    # the last chunk with a choice in it (output or the finish reason): where
    # ``vllm bench serve`` ends a request's latency, before the usage chunk and [DONE]
    t_last_choice: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


def absorb(state: StreamState, chunk: Any, now: float, api: str) -> None:
    """Fold one parsed SSE chunk into ``state``; a chunk of the wrong shape fails the
    attempt (a malformed stream is an error sample, never a guessed answer)."""
    started = bool(state.chunk_times)
    if not isinstance(chunk, dict):
        raise _malformed("not a JSON object", chunk, started)
    if chunk.get("error"):
        err = chunk["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise RequestFailed(f"server error in stream: {msg}", started=started)
    if isinstance(chunk.get("usage"), dict):
        state.usage = chunk["usage"]
    if chunk.get("prompt_token_ids") is not None:
        state.prompt_token_ids = _ids(chunk["prompt_token_ids"], chunk, started)
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise _malformed("'choices' is not a list of objects", chunk, started)
    for choice in choices:
        if choice.get("index", 0) != 0:
            continue
        state.t_last_choice = now
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise _malformed("'delta' is not an object", chunk, started)
        text = delta.get("content") if api == "chat" else choice.get("text")
        if text is not None and not isinstance(text, str):
            raise _malformed("the output text is not a string", chunk, started)
        ids = _ids(choice["token_ids"], chunk, started) if choice.get("token_ids") is not None \
            else None
        if choice.get("prompt_token_ids") is not None:
            state.prompt_token_ids = _ids(choice["prompt_token_ids"], chunk, started)
        if text or ids or _silent_token(choice, delta, text):
            state.chunk_times.append(now)
        if text:
            state.parts.append(text)
        if ids is not None:
            if state.token_ids is None:
                state.token_ids = []
            state.token_ids.extend(ids)
        if choice.get("finish_reason"):
            state.finish = str(choice["finish_reason"])


def _silent_token(choice: dict[str, Any], delta: dict[str, Any], text: str | None) -> bool:
    """A chunk of a token whose text is empty (vLLM streams one for a special token, or
    for a token whose characters the detokenizer holds back): a token all the same, as
    ``vllm bench serve`` counts it (its TTFT is the first chunk with a choice). Not a
    chunk that only ends the stream (llama.cpp's last, empty, with the finish reason) nor
    a chat stream's opening role delta."""
    return text == "" and not choice.get("finish_reason") and "role" not in delta


def _ids(value: Any, chunk: Any, started: bool) -> list[int]:
    if not isinstance(value, list) or not all(type(i) is int for i in value):
        raise _malformed("token IDs are not a list of integers", chunk, started)
    return list(value)


def _malformed(what: str, chunk: Any, started: bool) -> RequestFailed:
    return RequestFailed(f"malformed SSE chunk ({what}): {json.dumps(chunk)[:200]}",
                         started=started)


async def stream_once(client: httpx.AsyncClient, url: str, body: Mapping[str, Any],
                      api: str) -> StreamState:
    """POST ``body`` and read the SSE stream to its end."""
    state = StreamState(t_submit=time.perf_counter())
    headers_read = False
    try:
        async with client.stream("POST", url, json=body) as resp:
            headers_read = True
            if resp.status_code >= 400:
                raise refused(resp.status_code, await resp.aread(),
                              resp.headers.get("retry-after"))
            lines = resp.aiter_lines()
            async for line in lines:
                if feed(state, line, time.perf_counter(), api):
                    await _drain(lines)
                    break
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise RequestFailed(f"cannot connect: {exc}", transient=True, connect=True) from None
    except httpx.TimeoutException as exc:  # a timeout is never retried
        raise RequestFailed(f"{type(exc).__name__}: no data for the request timeout ({exc})",
                            started=bool(state.chunk_times)) from None
    except httpx.HTTPError as exc:
        started = bool(state.chunk_times)
        raise RequestFailed(f"{type(exc).__name__}: {exc}".rstrip(": "),
                            transient=not started, started=started,
                            unanswered=not headers_read) from None
    return finished(state)


def refused(status: int, body: bytes, retry_after_header: str | None) -> RequestFailed:
    """The failure of a request the server answered with an error ``status``."""
    detail = body.decode("utf-8", errors="replace")[:400]
    wait = retry_after(retry_after_header)
    said = "" if wait is None else f" (Retry-After {wait:g} s)"
    return RequestFailed(f"HTTP {status}{said}: {detail.strip()}",
                         transient=status in TRANSIENT_STATUS, retry_after=wait, answered=True)


def feed(state: StreamState, line: str, now: float, api: str) -> bool:
    """One SSE line of the body, read at ``now``, folded into ``state``; True at
    ``[DONE]``."""
    if not line.startswith("data:"):
        return False  # blank separators, comments (pings), event names
    data = line[5:].strip()
    if data == "[DONE]":
        state.done = True
        return True
    try:
        chunk = parse(data)
    except BadJson:
        raise RequestFailed(f"unparsable SSE data: {data[:200]!r}",
                            started=bool(state.chunk_times)) from None
    absorb(state, chunk, now, api)
    return False


def finished(state: StreamState) -> StreamState:
    """``state`` of a stream read to its end, or the ``RequestFailed`` of one cut short."""
    if state.finish is None:
        raise RequestFailed("the stream ended without a finish reason"
                            + ("" if state.done else " or [DONE]")
                            + " (llama_cpp.server cuts a stream short when another request "
                            "arrives unless started with --interrupt_requests false)",
                            started=bool(state.chunk_times))
    if not state.done:  # the usage chunk, if any, may have been lost with the rest
        raise RequestFailed("the stream ended without [DONE] (cut short after the finish "
                            "reason)", started=bool(state.chunk_times))
    return state


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read the (normally empty) rest of the body after ``[DONE]``, so that the
    connection goes back to the pool instead of being closed with unread data (a new
    connection per request costs a connect and, at high concurrency, sockets); a
    server that keeps the body open after ``[DONE]`` is left after a moment."""
    with contextlib.suppress(httpx.HTTPError, TimeoutError):
        async with asyncio.timeout(DRAIN_S):
            async for _ in lines:
                pass


DRAIN_S = 1.0


# -- what the server says about itself ---------------------------------------------------


async def reachable(url: str, headers: Mapping[str, str]) -> bool:
    try:
        async with http.async_client(headers=headers, timeout=3.0) as c:
            await c.get(url + "/v1/models")
        return True
    except httpx.HTTPError:
        return False


def pick_model(requested: str, served: list[str]) -> str:
    if requested in served:
        return requested
    if len(served) == 1:
        return served[0]
    if not served:
        raise AbgateError("the server lists no model at /v1/models")
    want = f"--model {requested!r} is not served" if requested else "no --model given"
    raise UsageError(f"{want}; the server offers: {', '.join(served)}")


def server_version(c: httpx.Client) -> tuple[str | None, str]:
    """(OpenAPI title, version): from ``/version`` (vLLM, SGLang) or ``/openapi.json``."""
    title = None
    with suppress_http():
        resp = c.get("/version")
        if resp.status_code == 200 and resp.json().get("version"):
            version = str(resp.json()["version"])
            with suppress_http():
                title = c.get("/openapi.json").json().get("info", {}).get("title")
            return title, version
    with suppress_http():
        info = c.get("/openapi.json").json().get("info", {})
        return info.get("title"), str(info.get("version") or "unknown")
    return title, "unknown"


def suppress_http() -> contextlib.suppress:
    return contextlib.suppress(httpx.HTTPError, ValueError, AttributeError)
