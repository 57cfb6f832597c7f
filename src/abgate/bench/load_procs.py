"""``bench --load`` spread over client processes (``--client-procs P``, docs/load.md).

One process stamps every chunk and sends every request on one event loop; at 32
streams its per-request cost (building, sending, finishing a request) adds up at each
wave of requests released together, and shows in TTFT. With P processes the in-flight
slots are split among them (N = sum of their slots) and each free slot takes the next
request index from one shared counter, in order: request i still leaves at its due
time or when the first slot frees, as with one semaphore. Without a cap (poisson with
no ``max_concurrency``) process w sends the requests i with i % P == w at their due
times. The clock origin ``t0`` is shared (``perf_counter`` is ``CLOCK_MONOTONIC`` on
Linux, one clock for the host's processes). The workers send each finished line here;
this process alone writes ``load_samples.jsonl`` (appended and fsynced as with one).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from abgate.bench.load import RequestTimes
from abgate.engines.openai.stream import Dialect
from abgate.errors import AbgateError

START_MARGIN_S = 0.05  # between the go signal and t0, so every worker is waiting at t0
READY_TIMEOUT_S = 120.0


class _Sink:
    """Where a worker's ``_one`` puts each finished line: to the writing process."""

    def __init__(self, q: Any, w: int) -> None:
        self.q, self.w = q, w

    def append(self, data: bytes) -> None:
        line = json.loads(data) | {"client_proc": self.w}
        self.q.put(("line", self.w, (json.dumps(line) + "\n").encode()))


def _slots(cap: int | None, procs: int, w: int) -> int | None:
    return None if cap is None else cap // procs + (1 if w < cap % procs else 0)


def _taker(counter: Any, n: int, w: int, procs: int,
           capped: bool) -> Callable[[], int]:
    """The next request index for a free slot of worker ``w`` (``n`` when none left)."""
    if not capped:
        mine = iter(range(w, n, procs))
        return lambda: next(mine, n)

    def take() -> int:
        with counter.get_lock():
            i = int(counter.value)
            counter.value = i + 1
        return min(i, n)

    return take


async def _work(job: Any, model: str, dialect: Dialect, schedule: Sequence[float], w: int,
                procs: int, counter: Any, t0v: Any, go: Any, q: Any) -> None:
    from abgate.bench import load_run as lr

    cap = job.spec.in_flight_cap
    slots, n = _slots(cap, procs, w), len(job.prompts)
    clients = lr._Clients(dict(job.headers))
    try:
        share = job.warmup // procs + (1 if w < job.warmup % procs else 0)
        await lr._warm_up(replace(job, warmup=share), clients, model, dialect, slots)
        bodies = await lr.before_clock(job, clients, model, dialect, slots)
        q.put(("ready", w, None))
        await asyncio.to_thread(go.wait)
        t0, take, sink = float(t0v.value), _taker(counter, n, w, procs, cap is not None), \
            _Sink(q, w)

        async def slot() -> list[tuple[int, RequestTimes]]:
            done = []
            while (i := take()) < n:
                done.append((i, await lr._one(job, clients, i, bodies[i], schedule[i], t0,
                                              None, sink)))
            return done

        parts = await asyncio.gather(*(slot() for _ in range(slots or n)))
    finally:
        await clients.aclose()
    q.put(("done", w, ([x for p in parts for x in p], time.perf_counter())))


def _worker(*args: Any) -> None:
    q = args[-1]
    try:
        asyncio.run(_work(*args))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back as one line
        q.put(("error", args[4], f"{type(exc).__name__}: {exc}".splitlines()[0][:400]))


def run_procs(job: Any, model: str, dialect: Dialect, schedule: Sequence[float],
              out: Path, procs: int) -> tuple[list[RequestTimes], float, float]:
    """The load of ``job`` from ``procs`` processes: (samples in request order, t0,
    duration from t0 to the last worker's end)."""
    from abgate.bench.load_run import SAMPLES, _Writer

    ctx = mp.get_context("spawn")
    counter, t0v, go, q = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_worker, daemon=True, args=(
        job, model, dialect, list(schedule), w, procs, counter, t0v, go, q))
        for w in range(procs)]
    for p in workers:
        p.start()
    writer = _Writer(out / SAMPLES)
    try:
        _gather(q, procs, "ready", None)
        t0v.value = time.perf_counter() + START_MARGIN_S
        go.set()
        done = _gather(q, procs, "done", writer)
    except BaseException:
        for p in workers:  # waiting for go or mid-run: nothing more of theirs is wanted
            p.kill()
        raise
    finally:
        writer.close()
        for p in workers:
            p.join(timeout=10)
    pairs = sorted((x for part, _ in done for x in part), key=lambda x: x[0])
    t0 = float(t0v.value)
    return [r for _, r in pairs], t0, max(end for _, end in done) - t0


def _gather(q: Any, procs: int, kind: str, writer: Any) -> list[Any]:
    """Every worker's ``kind`` message (lines given to ``writer`` meanwhile); a worker's
    error is a one-line AbgateError."""
    got: dict[int, Any] = {}
    while len(got) < procs:
        try:
            what, w, payload = q.get(timeout=READY_TIMEOUT_S if kind == "ready" else None)
        except queue.Empty:
            raise AbgateError(f"client processes: {procs - len(got)} not ready after "
                              f"{READY_TIMEOUT_S:g} s") from None
        if what == "error":
            raise AbgateError(f"client process {w}: {payload}")
        if what == "line":
            writer.append(payload)
        elif what == kind:
            got[w] = payload
    return [got[w] for w in range(procs)]
