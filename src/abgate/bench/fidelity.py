"""Fidelity: abgate's token-level figures beside the engine's own counters.

Engines that expose their own timings put them in ``GenerationResult.engine_timings``
under llama.cpp's perf-context names (other adapters map theirs onto these):

- ``prompt_eval_ms`` / ``prompt_eval_tokens``: time and tokens of the prompt pass;
- ``eval_ms`` / ``eval_tokens``: time and tokens of the single-token decode passes.

llama.cpp counts tokens *evaluated*: with N output tokens the last sampled token is
never fed back, so ``eval_tokens == N - 1``, exactly the number of intervals in
abgate's steady decode ``(N - 1) / (t_last - t_first)``. Both rates therefore cover
the same N - 1 decode passes; the gap between them is what lies outside the engine's
decode call: sampling, the adapter's token loop and Python. It is reported per token
in microseconds: ``overhead_us = (t_last - t_first) / (N - 1) - eval_ms / eval_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from abgate.engines.base import GenerationResult
from abgate.records.samples import RequestTiming

FIDELITY_FIELDS = ("engine_prefill_tps", "engine_decode_tps", "engine_tpot_ms",
                   "prefill_ratio", "decode_ratio", "overhead_us_per_token")


class Fidelity(BaseModel):
    """One request's fidelity figures (a bench line's ``fidelity``): the
    :data:`FIDELITY_FIELDS`, then ``counts_match``; every one None where unknown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine_prefill_tps: float | None
    engine_decode_tps: float | None
    engine_tpot_ms: float | None
    prefill_ratio: float | None
    decode_ratio: float | None
    overhead_us_per_token: float | None
    counts_match: bool | None

    def value(self, name: str) -> float | None:
        """One of the :data:`FIDELITY_FIELDS` by name."""
        figure: float | None = getattr(self, name)
        return figure


def _rate(tokens: Any, ms: Any) -> float | None:
    if not isinstance(tokens, int | float) or not isinstance(ms, int | float) or ms <= 0:
        return None
    return float(tokens) * 1000.0 / float(ms)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fidelity(result: GenerationResult, timing: RequestTiming) -> Fidelity:
    """The engine's own rates, their ratio to abgate's, and the per-token overhead.

    Every figure is ``None`` where the engine gives no counters or the request did not
    produce them; ``counts_match`` says whether the engine's token counts agree with
    the token-level ones (prompt tokens, and N - 1 decode evaluations)."""
    et: Mapping[str, Any] = result.engine_timings or {}
    eng_prefill = _rate(et.get("prompt_eval_tokens"), et.get("prompt_eval_ms"))
    eng_decode = _rate(et.get("eval_tokens"), et.get("eval_ms"))
    overhead = None
    if eng_decode and timing.steady_decode_tps:
        overhead = (1.0 / timing.steady_decode_tps - 1.0 / eng_decode) * 1e6
    counts_match = None
    if "eval_tokens" in et and "prompt_eval_tokens" in et:
        counts_match = (int(et["eval_tokens"]) == max(result.output_tokens - 1, 0)
                        and int(et["prompt_eval_tokens"]) == result.prompt_tokens)
    return Fidelity(
        engine_prefill_tps=eng_prefill,
        engine_decode_tps=eng_decode,
        engine_tpot_ms=1000.0 / eng_decode if eng_decode else None,
        prefill_ratio=_div(timing.prefill_tps, eng_prefill),
        decode_ratio=_div(timing.steady_decode_tps, eng_decode),
        overhead_us_per_token=overhead,
        counts_match=counts_match,
    )
