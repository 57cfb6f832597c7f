"""The engine-specific keys the workflows read, in one place: each engine's own names in
what it reports (its ``describe().effective_config``, a launched server's cleanup
evidence) and in the options table it is given (``--concurrency``, ``--launch``,
``--api-key-env``: the user's ``[engine_options]``, checked by the engine's own
``check_options``). They are the engines' dicts, not abgate's records: each engine names
its own keys, and no model of abgate's holds them (``tests/tools/key_reads.py`` counts
this module with the engines').
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def n_ctx(effective: Mapping[str, Any]) -> int | None:
    """The context window an engine reports as ``n_ctx`` (llama.cpp, the fake engine)."""
    value = effective.get("n_ctx")
    return value if isinstance(value, int) else None


def n_vocab(effective: Mapping[str, Any]) -> int | None:
    """The vocabulary size an engine reports (``n_vocab``), when an integer."""
    value = effective.get("n_vocab")
    return value if isinstance(value, int) else None


def why_not_scoring(effective: Mapping[str, Any]) -> str | None:
    """Why an engine cannot score teacher-forced sequences, as it reports it
    (``scoring.why_not``: the OpenAI-compatible engine's route); None when it says
    nothing."""
    route = effective.get("scoring", {})
    if isinstance(route, Mapping) and route.get("why_not"):
        return str(route["why_not"])
    return None


def concurrency(options: Mapping[str, Any]) -> int:
    """The requests in flight at once an engine is given (``--concurrency``; 1 absent)."""
    return int(options.get("concurrency", 1))


def launches(options: Mapping[str, Any]) -> bool:
    """Whether the engine launches its own server (``--launch``)."""
    return bool(options.get("launch"))


def api_key_env(options: Mapping[str, Any]) -> str | None:
    """The variable ``--api-key-env`` names (the key's value is never in the options)."""
    name = options.get("api_key_env")
    return name if isinstance(name, str) else None


def cleanup_verified(evidence: Mapping[str, Any]) -> bool:
    """Whether a launched server's cleanup evidence (``shared.server``) says the stop was
    verified."""
    return bool(evidence.get("verified"))
