"""Checks of what one streamed request returned, beyond its shape: whether its usage
report can be trusted, and how long a server asked to wait (``Retry-After``)."""

from __future__ import annotations

import email.utils
import time
from typing import Any, Protocol


class Streamed(Protocol):
    """What :func:`usage_problem` reads of ``openai_stream.StreamState``."""

    usage: dict[str, Any] | None
    chunk_times: list[float]
    token_ids: list[int] | None
    prompt_token_ids: list[int] | None


def usage_problem(state: Streamed, max_tokens: int, expected: bool) -> str | None:
    """Why the stream's usage report cannot be trusted, or None. ``expected``: the
    server reported usage at the probe, so a stream without one was cut short or is
    broken (counting chunks instead would silently change the token counts)."""
    usage = state.usage
    if usage is None:
        return "the stream carried no usage report (the server sent one at the probe)" \
            if expected else None
    out, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    for key, value in (("completion_tokens", out), ("prompt_tokens", prompt)):
        if value is not None and (type(value) is not int or value < 0):
            return f"inconsistent usage: {key} = {value!r}"
    if out is None:
        return None
    if out > max_tokens:
        return f"inconsistent usage: completion_tokens {out} > max_tokens {max_tokens}"
    if out < len(state.chunk_times):
        return (f"inconsistent usage: completion_tokens {out} < the {len(state.chunk_times)} "
                "output chunks streamed")
    if state.token_ids is not None and len(state.token_ids) != out:
        return (f"inconsistent usage: completion_tokens {out} != the {len(state.token_ids)} "
                "token IDs streamed")
    if prompt is not None and state.prompt_token_ids is not None \
            and len(state.prompt_token_ids) != prompt:
        return (f"inconsistent usage: prompt_tokens {prompt} != the "
                f"{len(state.prompt_token_ids)} prompt token IDs streamed")
    return None


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())
