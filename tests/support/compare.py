"""Builders of synthetic ``samples.jsonl`` records for the compare/policy/verdict tests."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def make_sample(item: int, seed: int = 0, *, correct: bool | None = True,
                tps: float | None = 100.0, tokens: int = 50, rep: float = 0.05,
                finish: str = "stop", invalid: bool = False, token_ids: list[int] | None = None,
                prefill: float | None = 1000.0, ttft: float | None = 0.1,
                warmup: bool = False) -> dict[str, Any]:
    """One record shaped like ``abgate.runner.samples.build_sample`` writes."""
    item_id = f"item-{item:04d}"
    ids = token_ids if token_ids is not None else [item * 7 + seed + k for k in range(tokens)]
    error = finish == "error"
    return {
        "key": f"{item_id}#{seed}",
        "item_id": item_id,
        "seed": seed,
        "warmup": warmup,
        "prompt": {"sha256": hashlib.sha256(item_id.encode()).hexdigest(), "tokens": 40},
        "output": {"token_ids": None if error else ids, "tokens": 0 if error else len(ids),
                   "sha256": None if error else hashlib.sha256(
                       ",".join(map(str, ids)).encode()).hexdigest()},
        "finish_reason": finish,
        "timing": {"steady_decode_tps": None if error else tps,
                   "prefill_tps": None if error else prefill,
                   "ttft_s": None if error else ttft,
                   "tpot_ms": None if error or not tps else 1000.0 / tps},
        "correct": None if error else correct,
        "health": {"correct": None if error else correct, "invalid": invalid and not error,
                   "truncated": finish == "length", "natural_stop": finish == "stop",
                   "error": error, "output_tokens": 0 if error else len(ids),
                   "seq_rep_4": 0.0 if error else rep},
    }


def make_arm(n_items: int, *, accuracy: float = 0.6, seeds: int = 1, tps: float = 100.0,
             noise: float = 0.0, rng_seed: int = 0, correct_items: set[int] | None = None,
             **kwargs: Any) -> list[dict[str, Any]]:
    """An arm over ``n_items`` items: the first ``accuracy * n_items`` items are correct
    (or exactly ``correct_items``), decode speed ``tps`` times log-normal ``noise``."""
    rng = np.random.default_rng(rng_seed)
    right = correct_items if correct_items is not None else set(range(round(accuracy * n_items)))
    return [
        make_sample(i, s, correct=i in right, tps=float(tps * np.exp(noise * rng.normal())),
                    **kwargs)
        for i in range(n_items) for s in range(seeds)
    ]
