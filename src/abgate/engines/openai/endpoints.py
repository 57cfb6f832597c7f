"""The openai adapter's endpoints as it keeps count of them: per-endpoint figures
(requests, errors, retries, busy time), the retry policy (backoff, ``Retry-After``),
and how a failed request or a dead server is reported."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from abgate.engines.base import GenerationRequest, GenerationResult
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


def error_result(req: GenerationRequest, t_submit: float, message: str, ep: EndpointStats,
                  attempts: int) -> GenerationResult:
    return GenerationResult.failed(req.id, t_submit, f"{ep.shown}: {message}",
                                   {"attempts": float(attempts)})


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first non-cancellation error inside a (nested) exception group."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc  # type: ignore[no-any-return]
    return group
