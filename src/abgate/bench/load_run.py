"""The open-loop load generator against an OpenAI-compatible server (docs/load.md).

Requests leave at their seeded due times (``load.arrival_schedule``), at most the
shape's in-flight cap open at once (an asyncio semaphore), each one streamed by the
openai engine's SSE parsing (``load_http``: aiohttp, as ``vllm bench serve`` sends),
so its chunks are stamped and counted the same way, each on a session of one
connection of its own for as long as it is in flight. Every finished request
is appended and fsynced to ``load_samples.jsonl`` (by a writer thread, off the event
loop); ``--client-procs`` spreads the slots over processes (``load_procs``); ``load.json``
holds the spec, the schedule, the prompts' source and indices, and the metrics,
computed from the raw samples alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import httpx

from abgate import safefs
from abgate.bench import load_http
from abgate.bench.load import LoadSpec, RequestTimes, arrival_schedule, max_in_flight, serve_metrics
from abgate.engines.base import SamplingParams
from abgate.engines.openai.stream import (
    DIALECTS,
    Dialect,
    RequestFailed,
    StreamState,
    identify,
    sampling_body,
)
from abgate.engines.shared import http
from abgate.errors import AbgateError, UsageError
from abgate.jsonl_append import append_line
from abgate.redact import redact_text, redact_url

SAMPLES = "load_samples.jsonl"
RECORD = "load.json"


RESERVED_UNCAPPED = 64  # clients made before the clock for arrivals with no in-flight cap


@dataclass(frozen=True)
class LoadJob:
    url: str  # the server's base URL (http://HOST:PORT)
    model: str | None
    prompts: Sequence[str]  # one per request, in send order
    prompt_source: str
    prompt_indices: Sequence[int]
    spec: LoadSpec
    output_len: int = 128
    api: str = "completions"  # completions (as vllm bench serve's default) or chat
    headers: tuple[tuple[str, str], ...] = ()
    warmup: int = 0  # requests sent (and not measured) before the clock starts
    procs: int = 1  # client processes the in-flight slots are spread over (load_procs)


def _body(job: LoadJob, prompt: str, model: str, dialect: Dialect) -> dict[str, Any]:
    params = SamplingParams(max_tokens=job.output_len, ignore_eos=True)
    body: dict[str, Any] = {"model": model}
    if job.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body |= sampling_body(params, dialect)
    # no dialect.extra (vLLM's return_token_ids): token IDs are not used here, and
    # they would lengthen every chunk the server writes and the client parses
    return body | {"stream": True, "stream_options": {"include_usage": True}}


def _discover(job: LoadJob) -> tuple[str, Dialect]:
    try:
        with http.client(base_url=job.url, headers=dict(job.headers), timeout=10.0) as c:
            models = c.get("/v1/models").json()
            title = None
            with contextlib.suppress(httpx.HTTPError, ValueError):
                title = c.get("/openapi.json").json().get("info", {}).get("title")
    except (httpx.HTTPError, ValueError) as exc:
        raise AbgateError(f"{redact_url(job.url)}: cannot list models ({exc})") from None
    served = [str(m.get("id")) for m in models.get("data", [])]
    if not served:
        raise AbgateError(f"{redact_url(job.url)}: /v1/models lists no model")
    model = job.model or served[0]
    return model, identify(models, title) if served else DIALECTS["unknown"]


class LineSink(Protocol):
    """Where a finished request's line goes (``_Writer``, or a client process's pipe)."""

    def append(self, data: bytes) -> None: ...


async def _one(job: LoadJob, clients: _Clients, i: int, body: dict[str, Any],
               due: float, t0: float, gate: asyncio.Semaphore | None,
               writer: LineSink) -> RequestTimes:
    wait = t0 + due - time.perf_counter()
    if wait > 0:  # (a closed loop's requests, all due at 0, go without a turn of the loop)
        await asyncio.sleep(wait)
    if gate is not None:
        await gate.acquire()
    error = None
    try:
        st, attempts = await _stream(job, clients, body)
        send, end = st.t_submit - t0, time.perf_counter() - t0
        chunks = tuple(t - t0 for t in st.chunk_times)
        last = None if st.t_last_choice is None else st.t_last_choice - t0
        usage = (st.usage or {}).get("completion_tokens")
        n_out = int(usage) if isinstance(usage, int) else len(chunks)
    except _Failed as exc:
        error, chunks, n_out, last, attempts = redact_text(str(exc.cause)), (), 0, None, \
            exc.attempts
        send, end = exc.t_submit - t0, time.perf_counter() - t0
    finally:
        if gate is not None:
            gate.release()
    times = RequestTimes(error is None, send, chunks, end, n_out, last, attempts)
    line = {"index": i, "due_s": due, "ok": times.ok, "t_send_s": send, "t_end_s": end,
            "t_last_s": last, "t_chunks_s": list(chunks), "output_tokens": n_out,
            "attempts": attempts, "error": error}
    writer.append((json.dumps(line) + "\n").encode())
    return times


async def _stream(job: LoadJob, clients: _Clients,
                  body: dict[str, Any]) -> tuple[StreamState, int]:
    """``body`` streamed on a client taken from ``clients`` (and given back): what came
    back, its ``t_submit`` the first attempt's, and the attempts. An attempt whose
    connection failed before any answer is sent once more, on a new connection:
    HTTP/1.1's keep-alive race (the server closes an idle connection just as the client
    reuses it), which browsers and Go's client retry too. A failure raises ``_Failed``."""
    path = "/v1/chat/completions" if job.api == "chat" else "/v1/completions"
    client = clients.take()
    first = time.perf_counter()  # a retried request's latency counts from here
    attempt = 1
    try:
        while True:
            try:
                st = await load_http.stream(client, job.url + path, body, job.api)
            except RequestFailed as exc:
                if attempt == 2 or not exc.unanswered or exc.connect:
                    raise _Failed(exc, attempt, first) from None
                client, attempt = await clients.replace(client), 2
                continue
            st.t_submit = first
            return st, attempt
    finally:
        clients.give(client)


class _Failed(Exception):
    """A request that failed after ``attempts`` attempts, the first sent at
    ``t_submit``."""

    def __init__(self, cause: RequestFailed, attempts: int, t_submit: float) -> None:
        super().__init__(str(cause))
        self.cause, self.attempts, self.t_submit = cause, attempts, t_submit


class _Writer:
    """Appends and fsyncs each finished request's line on a thread of its own, in the
    order given: an fsync (milliseconds on some disks) on the event loop would stall
    every open stream, stamping their chunks late and delaying the next sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-samples")
        self.pending: list[Future[None]] = []

    def append(self, data: bytes) -> None:
        self.pending.append(self.pool.submit(append_line, self.path, data))

    def close(self) -> None:
        """Wait for every line (raising the first write error), then stop the thread."""
        try:
            for f in self.pending:
                f.result()
        finally:
            self.pool.shutdown(wait=True)


class _Clients:
    """A session of one connection for each request in flight, taken for a request
    and given back after it (a request whose kept-alive connection was closed under it
    is sent again on a new session: ``replace``)."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers
        self.free: list[aiohttp.ClientSession] = []
        self.made: list[aiohttp.ClientSession] = []

    def take(self) -> aiohttp.ClientSession:
        if self.free:
            return self.free.pop()
        client = load_http.session(self.headers)
        self.made.append(client)
        return client

    def give(self, client: aiohttp.ClientSession) -> None:
        self.free.append(client)

    def reserve(self, n: int) -> None:
        """Sessions for ``n`` requests in flight made now (their connections open when
        first used). Given-back ones are taken first, so these wait at the bottom."""
        self.free[:0] = [self.take() for _ in range(max(0, n - len(self.free)))]

    async def replace(self, client: aiohttp.ClientSession) -> aiohttp.ClientSession:
        """A session of a new connection in place of ``client`` (closed)."""
        self.made.remove(client)
        await client.close()
        return self.take()

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self.made))


async def _run(job: LoadJob, model: str, dialect: Dialect, schedule: Sequence[float],
               out: Path) -> tuple[list[RequestTimes], float, float]:
    cap = job.spec.in_flight_cap
    gate = asyncio.Semaphore(cap) if cap is not None else None
    clients = _Clients(dict(job.headers))
    try:
        await _warm_up(job, clients, model, dialect, cap)
        writer = _Writer(out / SAMPLES)
        bodies = await before_clock(job, clients, model, dialect, cap)
        try:
            t0 = time.perf_counter()
            reqs = await asyncio.gather(*(
                _one(job, clients, i, body, due, t0, gate, writer)
                for i, (body, due) in enumerate(zip(bodies, schedule, strict=True))))
            duration = time.perf_counter() - t0
        finally:
            writer.close()
    finally:
        await clients.aclose()
    return list(reqs), t0, duration


async def before_clock(job: LoadJob, clients: _Clients, model: str, dialect: Dialect,
                       slots: int | None) -> list[dict[str, Any]]:
    """What the load needs made before its clock starts, so the clock measures the
    load: every request's body, a session for each of ``slots`` requests in flight, and
    one GET of ``/v1/models`` on a session of its own, closed after (a process's first
    request sets up the client's machinery: with httpx, importing anyio's backend took
    about 20 ms; the measured requests' connections stay as they were)."""
    bodies = [_body(job, p, model, dialect) for p in job.prompts]
    clients.reserve(min(slots or RESERVED_UNCAPPED, len(bodies)))
    async with load_http.session(dict(job.headers), timeout_s=10.0) as once:
        await load_http.get(once, job.url + "/v1/models")
    return bodies


async def _warm_up(job: LoadJob, clients: _Clients, model: str, dialect: Dialect,
                   cap: int | None) -> None:
    """``job.warmup`` requests (the prompts in turn), at most ``cap`` in flight, before
    the clock starts: the server's first batches and the client's connections are then
    behind it. Nothing of them is recorded; one that fails stops the bench."""
    gate = asyncio.Semaphore(cap or job.warmup or 1)

    async def one(i: int) -> None:
        async with gate:
            body = _body(job, job.prompts[i % len(job.prompts)], model, dialect)
            try:
                await _stream(job, clients, body)
            except _Failed as exc:
                raise AbgateError(f"{redact_url(job.url)}: warm-up request {i} failed "
                                  f"({exc})") from None

    await asyncio.gather(*(one(i) for i in range(job.warmup)))


def run_load(job: LoadJob, out: Path, *, force: bool = False) -> dict[str, Any]:
    """Run ``job`` against its server, write ``out/load.json`` and the raw samples;
    return the record."""
    if job.api not in ("completions", "chat"):
        raise UsageError(f"--api {job.api!r}: expected completions or chat")
    if job.warmup < 0:
        raise UsageError(f"--warmup {job.warmup}: expected >= 0")
    cap = job.spec.in_flight_cap
    if job.procs < 1 or (cap is not None and job.procs > cap):
        want = ">= 1" if cap is None else f"1 to {cap} (the requests in flight)"
        raise UsageError(f"--client-procs {job.procs}: expected {want}")
    if ((out / RECORD).exists() or (out / SAMPLES).exists()) and not force:
        raise UsageError(f"{out}: holds a load bench already (give --force to overwrite)")
    model, dialect = _discover(job)
    out.mkdir(parents=True, exist_ok=True)
    if (out / SAMPLES).exists():
        safefs.truncate(out / SAMPLES, 0)
    schedule = arrival_schedule(job.spec)
    if job.procs > 1:
        from abgate.bench.load_procs import run_procs
        reqs, t0, duration = run_procs(job, model, dialect, schedule, out, job.procs)
    else:
        reqs, t0, duration = asyncio.run(_run(job, model, dialect, schedule, out))
    record = {"kind": "load_bench", "server": redact_url(job.url), "model": model,
              "dialect": dialect.kind, "api": job.api, "output_len": job.output_len,
              "load": job.spec.to_dict(), "schedule_s": schedule,
              "warmup_requests": job.warmup, "client_procs": job.procs,
              "t0_perf_counter": t0,
              "prompts": {"source": job.prompt_source, "indices": list(job.prompt_indices)},
              "max_in_flight_observed": max_in_flight(reqs),
              "metrics": serve_metrics(reqs, duration)}
    safefs.write_atomic(out / RECORD, (json.dumps(record, indent=1) + "\n").encode())
    return record


def read_samples(out: Path) -> list[RequestTimes]:
    """The raw samples of a load bench, in request order (for recomputing metrics)."""
    rows = [json.loads(line) for line in (out / SAMPLES).read_text().splitlines() if line]
    rows.sort(key=lambda r: r["index"])
    return [RequestTimes(r["ok"], r["t_send_s"], tuple(r["t_chunks_s"]), r["t_end_s"],
                         r["output_tokens"], r.get("t_last_s"), r.get("attempts", 1))
            for r in rows]


def load_prompts(data: str | None, num_prompts: int, seed: int) -> tuple[list[str], str, list[int]]:
    """(prompts in send order, their source, the indices drawn): a JSON Lines file of
    ``{"prompt": ...}`` objects (``vllm bench serve --dataset-name custom``'s format)
    or GSM8K questions (a data path or ``hf:`` id, as ``--data``), seeded sample."""
    from abgate.bench.load import sample_indices
    if data is not None and data.endswith(".jsonl") and "prompt" in _first_keys(Path(data)):
        texts = [str(json.loads(line)["prompt"]) for line in
                 Path(data).read_text().splitlines() if line.strip()]
        source = f"prompt file {data}"
    else:
        from abgate.suites import gsm8k
        suite = gsm8k.load(data)
        texts, source = [it.question for it in suite.items], f"gsm8k {suite.source}"
    if not texts:
        raise UsageError(f"{data}: no prompts")
    idx = sample_indices(len(texts), num_prompts, seed)
    return [texts[i] for i in idx], source, idx


def _first_keys(path: Path) -> set[str]:
    try:
        with path.open() as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read prompts ({exc})") from None
    return set(first) if isinstance(first, dict) else set()
