"""Suites: datasets turned into items with exact integer answers (or, the generic
``jsonl`` suite, text answers scored by exact match or a regex), and prompts."""

from __future__ import annotations

from abgate.errors import UsageError, did_you_mean
from abgate.suites.base import Item, Suite, parse_seeds, select_items

SUITES = ("gsm8k", "synthetic", "jsonl")


def load_suite(name: str, data: str | None = None, difficulty: str = "easy",
               synthetic_seed: int = 0) -> Suite:
    """Load a suite by name. ``data`` is a local path or ``hf:<id>`` for gsm8k."""
    if name == "gsm8k":
        from abgate.suites import gsm8k

        return gsm8k.load(data)
    if name == "synthetic":
        if data is not None:
            raise UsageError("--data is not used by the synthetic suite (it needs no data)")
        from abgate.suites import synthetic

        return synthetic.load(difficulty, synthetic_seed)
    if name == "jsonl":
        from abgate.suites import generic

        return generic.load(data)
    raise UsageError(f"unknown suite {name!r}; expected one of {', '.join(SUITES)}"
                     + did_you_mean(name, SUITES))


__all__ = ["SUITES", "Item", "Suite", "load_suite", "parse_seeds", "select_items"]
