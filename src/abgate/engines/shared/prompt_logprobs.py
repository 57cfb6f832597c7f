"""vLLM's prompt log-probs, one position at a time (shared by the in-process ``vllm``
engine and the ``openai`` engine against ``vllm serve``).

vLLM reports, for every prompt position but the first, ``{token_id: Logprob}``: the
``prompt_logprobs`` most likely tokens and the prompt token itself (with its 1-based
``rank``, which may be beyond k). In JSON the IDs are strings and ``Logprob`` is an
object with ``logprob``, ``rank`` and ``decoded_token``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abgate.engines.base import TokenScores
from abgate.errors import AbgateError

__all__ = ["number", "prompt_position", "scores_from_rows"]


def number(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise AbgateError(f"{where}: expected a number, got {value!r}")


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


def prompt_position(entry: Any, token: int, k: int,
                   where: str) -> tuple[list[tuple[int, float]], float | None]:
    """One prompt position, ``{id: Logprob}`` (objects or their JSON) -> the top-k
    ``(id, logprob)`` pairs (rank <= k; without ranks, the k largest) and the scored
    token's log-prob (None when absent)."""
    if not isinstance(entry, Mapping):
        raise AbgateError(f"scoring: vLLM {where} is {entry!r}, not a mapping")
    pairs, ranked = [], []
    for key, value in entry.items():
        logprob = value if isinstance(value, int | float) else _field(value, "logprob")
        try:
            pair = (int(key), number(logprob, f"vLLM {where}[{key}]"))
        except ValueError:
            raise AbgateError(f"scoring: vLLM {where}: token ID {key!r} is not an integer") \
                from None
        pairs.append(pair)
        rank = _field(value, "rank")
        if isinstance(rank, int) and rank <= k:
            ranked.append(pair)
    own = next((lp for i, lp in pairs if i == token), None)
    top = ranked if ranked else sorted(pairs, key=lambda p: (-p[1], p[0]))[:k]
    return top, own


def scores_from_rows(rows: Any, prompt: list[int], cont: list[int], k: int) -> TokenScores:
    """The continuation's top-k scores from the prompt log-prob rows of one request
    whose prompt was ``prompt + cont``."""
    n = len(prompt) + len(cont)
    if not isinstance(rows, list | tuple) or len(rows) != n:
        got = len(rows) if isinstance(rows, list | tuple) else "no"
        raise AbgateError(f"scoring: vLLM returned {got} prompt log-prob rows for {n} tokens")
    tops, own = [], []
    for j, token in enumerate(cont):
        pairs, logprob = prompt_position(rows[len(prompt) + j], token, k,
                                         f"prompt_logprobs[{len(prompt) + j}]")
        tops.append(pairs)
        own.append(logprob)
    return TokenScores.from_top_k(cont, tops, own, k)
