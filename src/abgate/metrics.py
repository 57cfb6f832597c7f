"""Speed metrics, defined once (see docs/metrics.md).

Per request, from the adapter's token timestamps and the engine's token counts:

- TTFT = first output token time - submit time; prefill tok/s = prompt tokens / TTFT
- steady decode tok/s = (output tokens - 1) / (last token time - first token time);
  TPOT ms = 1000 / steady decode tok/s (the first token is excluded: it belongs to prefill)
- ITL = gaps between consecutive token times (streaming engines)
- E2E = last token time - submit time; output tok/s = output tokens / E2E

A value that is undefined for a request (e.g. steady decode with a single output
token) is ``None``, never zero, so it cannot drag an average down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from abgate.engines.base import GenerationResult
from abgate.records.samples import RequestTiming


def _ratio(num: float, den: float | None) -> float | None:
    return num / den if den is not None and den > 0 else None


def request_timing(r: GenerationResult) -> RequestTiming:
    if r.finish_reason == "error" or r.t_first_token is None or r.t_last_token is None:
        return RequestTiming(ttft_s=None, prefill_tps=None, decode_s=None,  # each written
                             steady_decode_tps=None, tpot_ms=None, e2e_s=None, output_tps=None)
    ttft = r.t_first_token - r.t_submit
    decode = r.t_last_token - r.t_first_token
    e2e = r.t_last_token - r.t_submit
    steady = _ratio(r.output_tokens - 1, decode) if r.output_tokens >= 2 else None
    return RequestTiming(
        ttft_s=ttft,
        prefill_tps=_ratio(r.prompt_tokens, ttft) if r.prompt_tokens > 0 else None,
        decode_s=decode,
        steady_decode_tps=steady,
        tpot_ms=1000.0 / steady if steady else None,
        e2e_s=e2e,
        output_tps=_ratio(r.output_tokens, e2e),
    )


def inter_token_latencies(token_times: Sequence[float]) -> list[float]:
    return [b - a for a, b in zip(token_times, token_times[1:], strict=False)]


def distribution(values: Sequence[float | None]) -> dict[str, Any]:
    """Request-weighted mean, median, p10/p90, min/max and CV of the defined values."""
    xs = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if xs.size == 0:
        return {"n": 0}
    mean = float(xs.mean())
    return {
        "n": int(xs.size),
        "mean": mean,
        "median": float(np.median(xs)),
        "p10": float(np.percentile(xs, 10)),
        "p90": float(np.percentile(xs, 90)),
        "min": float(xs.min()),
        "max": float(xs.max()),
        "cv": float(xs.std(ddof=1) / mean) if xs.size > 1 and mean else None,
    }
