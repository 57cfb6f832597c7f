"""Load shapes for served benches, their seeded arrival schedule, and the metrics of
``vllm bench serve`` computed from raw per-request samples (docs/load.md).

A shape is ``closed`` (today's bench: one request at a time, the default),
``concurrency:N`` (every request due at once, N kept in flight) or ``poisson:RATE``
(requests per second; intervals drawn from a gamma distribution of shape
``burstiness`` and mean ``1/RATE``, so burstiness 1 is a Poisson process), optionally
capped by ``max_concurrency`` requests in flight. No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from abgate.errors import UsageError

SHAPES = ("closed", "concurrency", "poisson")


@dataclass(frozen=True)
class LoadSpec:
    shape: str = "closed"
    concurrency: int | None = None  # concurrency:N
    rate: float | None = None  # poisson:RATE, requests per second
    burstiness: float = 1.0
    max_concurrency: int | None = None
    num_prompts: int = 100
    seed: int = 0

    @property
    def closed(self) -> bool:
        return self.shape == "closed"

    @property
    def in_flight_cap(self) -> int | None:
        """The most requests in flight (None: unbounded)."""
        if self.shape == "closed":
            return 1
        if self.shape == "concurrency":
            return self.concurrency
        return self.max_concurrency

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "concurrency": self.concurrency, "rate": self.rate,
                "burstiness": self.burstiness, "max_concurrency": self.max_concurrency,
                "num_prompts": self.num_prompts, "seed": self.seed}


def parse_load(text: str, *, burstiness: float = 1.0, max_concurrency: int | None = None,
               num_prompts: int = 100, seed: int = 0) -> LoadSpec:
    """``closed``, ``concurrency:N`` or ``poisson:RATE``; a bad spec is a one-line
    ``UsageError`` (exit 2)."""
    shape, _, arg = text.strip().partition(":")
    where = f"--load {text!r}"
    if shape not in SHAPES:
        raise UsageError(f"{where}: expected closed, concurrency:N or poisson:RATE")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise UsageError(f"--burstiness {burstiness}: expected a number > 0")
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError(f"--max-concurrency {max_concurrency}: expected >= 1")
    if num_prompts < 1:
        raise UsageError(f"--num-prompts {num_prompts}: expected >= 1")
    base = LoadSpec(burstiness=burstiness, num_prompts=num_prompts, seed=seed)
    if shape == "closed":
        if arg:
            raise UsageError(f"{where}: closed takes no argument")
        return base
    if shape == "concurrency":
        if not arg.isdigit() or int(arg) < 1:
            raise UsageError(f"{where}: expected concurrency:N with N an integer >= 1")
        n = int(arg)
        return replace(base, shape="concurrency", concurrency=n,
                       max_concurrency=max_concurrency)
    try:
        rate = float(arg)
    except ValueError:
        rate = float("nan")
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"{where}: expected poisson:RATE with RATE requests/s > 0")
    return replace(base, shape="poisson", rate=rate, max_concurrency=max_concurrency)


def arrival_schedule(spec: LoadSpec) -> list[float]:
    """Seconds after the start at which each request is due: request 0 at 0, then
    the cumulative sum of gamma(shape=burstiness, scale=1/(rate*burstiness)) intervals
    (as ``vllm bench serve`` spaces them); all 0 for ``concurrency:N``; for ``closed``
    0 too (each request waits for the previous one through the in-flight cap of 1)."""
    n = spec.num_prompts
    if spec.shape != "poisson" or spec.rate is None:
        return [0.0] * n
    rng = np.random.default_rng(spec.seed)
    gaps = rng.gamma(shape=spec.burstiness, scale=1.0 / (spec.rate * spec.burstiness),
                     size=max(n - 1, 0))
    return [0.0, *np.cumsum(gaps).tolist()][:n]


def sample_indices(n_items: int, num_prompts: int, seed: int) -> list[int]:
    """Which items are sent, in order: a seeded permutation, repeated if more prompts
    than items are asked for."""
    rng = np.random.default_rng(seed)
    out: list[int] = []
    while len(out) < num_prompts:
        out.extend(int(i) for i in rng.permutation(n_items))
    return out[:num_prompts]


@dataclass(frozen=True)
class RequestTimes:
    """One request's raw facts, as appended to ``load_samples.jsonl``."""

    ok: bool
    t_send: float  # seconds after the benchmark start
    t_chunks: tuple[float, ...]  # each output chunk's arrival, seconds after the start
    t_end: float  # the stream read to its end ([DONE])
    output_tokens: int
    # the last chunk carrying a choice (None in samples written before it was kept):
    # where a request's latency ends, as in ``vllm bench serve``
    t_last: float | None = None
    # 2 when the first attempt's connection failed before any answer and the request
    # was sent again on a new one (its latency still counts from the first send)
    attempts: int = 1

    @property
    def latency_end(self) -> float:
        return self.t_end if self.t_last is None else self.t_last


def _dist(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "median": None, "std": None, "p99": None}
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "std": float(a.std()),
            "p99": float(np.percentile(a, 99))}


def serve_metrics(reqs: Sequence[RequestTimes], duration_s: float) -> dict[str, Any]:
    """The figures of ``vllm bench serve`` from raw samples (successful requests only),
    times in ms: TTFT = first output chunk - send; E2EL = the last chunk carrying a
    choice (output or the finish reason; not the usage chunk or [DONE]) - send; TPOT =
    (E2EL - TTFT) / (output_tokens - 1), for requests of more than one output token;
    ITL = the gaps between consecutive chunks of every request, pooled; output
    throughput = total output tokens / duration; request throughput = completed /
    duration; retried = requests sent a second time after their first connection failed
    unanswered. Each figure's mean, median, std (population) and p99 (linear
    interpolation, numpy's default)."""
    done = [r for r in reqs if r.ok and r.t_chunks]
    ttft = [(r.t_chunks[0] - r.t_send) * 1e3 for r in done]
    e2el = [(r.latency_end - r.t_send) * 1e3 for r in done]
    tpot = [(e - t) / (r.output_tokens - 1)
            for r, t, e in zip(done, ttft, e2el, strict=True) if r.output_tokens > 1]
    itl = [(b - a) * 1e3 for r in done for a, b in zip(r.t_chunks, r.t_chunks[1:], strict=False)]
    out_tokens = sum(r.output_tokens for r in done)
    return {"completed": len(done), "failed": len(reqs) - len(done),
            "retried": sum(1 for r in reqs if r.attempts > 1),
            "duration_s": duration_s, "total_output_tokens": out_tokens,
            "request_throughput": len(done) / duration_s if duration_s > 0 else None,
            "output_throughput": out_tokens / duration_s if duration_s > 0 else None,
            "ttft_ms": _dist(ttft), "tpot_ms": _dist(tpot), "itl_ms": _dist(itl),
            "e2el_ms": _dist(e2el)}


def max_in_flight(reqs: Sequence[RequestTimes]) -> int:
    """The most requests open at once, from their send and end times."""
    events = sorted([(r.t_send, 1) for r in reqs] + [(r.t_end, -1) for r in reqs],
                    key=lambda e: (e[0], e[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best
