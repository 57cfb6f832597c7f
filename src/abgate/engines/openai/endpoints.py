"""The openai adapter's endpoints as it keeps count of them: per-endpoint figures
(requests, errors, retries, busy time), the retry policy (backoff, ``Retry-After``),
and how a failed request or a dead server is reported."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from abgate.engines.base import GenerationRequest, GenerationResult
from abgate.engines.openai.checks import usage_problem
from abgate.engines.openai.stream import RequestFailed, StreamState
from abgate.errors import AbgateError
from abgate.redact import redact_url


@dataclass
class EndpointStats:
    url: str
    in_flight: int = 0
    requests: int = 0
    errors: int = 0  # error samples, and requests cut off without one (counted in both)
    cut_off: int = 0  # in flight when the run ended (a dead server): no sample recorded
    retries: int = 0
    output_tokens: int = 0
    busy_s: float = 0.0

    @property
    def shown(self) -> str:  # the URL as records and messages show it
        return redact_url(self.url)

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "in_flight"}, "url": self.shown}


class ServerGone(AbgateError):
    """The launched server died or the endpoint stopped answering: the run fails."""


RETRY_AFTER_CAP_S = 60.0


def backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds before the next attempt: exponential, or the server's ``Retry-After``
    where it asked for longer (capped, so a bad header cannot stall a run)."""
    delay: float = min(0.5 * 2.0 ** attempt, 5.0)
    return delay if retry_after is None else max(delay, min(retry_after, RETRY_AFTER_CAP_S))


T = TypeVar("T")


async def retried(step: Callable[[], Awaitable[T]], retries: int, ep: EndpointStats,
                  check_alive: Callable[[Any, bool], Awaitable[None]]) -> T:
    """``step()`` (a request that changes nothing on the server: a chat render, a
    tokenize), again after a transient failure, at most ``retries`` times more, with
    the backoff; ``check_alive(exc, last)`` after each failure (a dead server fails the
    run). The last failure is raised."""
    attempt = 0
    while True:
        try:
            return await step()
        except RequestFailed as exc:
            last = attempt == retries or not exc.transient
            await check_alive(exc, last)
            if last:
                raise
            ep.retries += 1
            await asyncio.sleep(backoff(attempt, exc.retry_after))
            attempt += 1


def error_result(req: GenerationRequest, t_submit: float, message: str, ep: EndpointStats,
                  attempts: int) -> GenerationResult:
    return GenerationResult.failed(req.id, t_submit, f"{ep.shown}: {message}",
                                   {"attempts": float(attempts)})


_FINISH = {"stop": "stop", "eos": "stop", "eos_token": "stop", "stop_sequence": "stop",
           "length": "length"}


def stream_result(req: GenerationRequest, s: StreamState, ep: EndpointStats, index: int,
                  attempt: int, usage_expected: bool) -> GenerationResult:
    """The sample of a stream read whole (``index``: its endpoint's), or an error sample
    when its usage report does not add up (``checks.usage_problem``)."""
    problem = usage_problem(s, req.params.max_tokens, usage_expected)
    if problem is not None:
        return error_result(req, s.t_submit, f"attempt {attempt + 1}: {problem}", ep,
                            attempt + 1)
    usage = s.usage or {}
    finish = _FINISH.get(s.finish or "")
    out_tokens = usage.get("completion_tokens")
    times = s.chunk_times
    return GenerationResult(
        request_id=req.id, text=s.text,
        finish_reason=finish or "error",  # type: ignore[arg-type]
        error=None if finish else f"server finish_reason {s.finish!r}",
        prompt_tokens=int(usage.get("prompt_tokens") or len(s.prompt_token_ids or ())),
        output_tokens=int(out_tokens if out_tokens is not None else len(times)),
        output_token_ids=s.token_ids, prompt_token_ids=s.prompt_token_ids,
        t_submit=s.t_submit, t_first_token=times[0] if times else None,
        t_last_token=times[-1] if times else None, token_times=list(times),
        engine_timings={"endpoint": float(index), "attempts": attempt + 1.0,
                        "chunks": float(len(times)),
                        "usage_reported": 1.0 if out_tokens is not None else 0.0})


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first non-cancellation error inside a (nested) exception group."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc  # type: ignore[no-any-return]
    return group
