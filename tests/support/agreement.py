"""Fabricated teacher-forced scoring records for the agreement tests (no engine runs).

The files follow the contract the A/B scoring pass writes (docs/statistics.md,
"Distribution agreement"): ``arms/<arm>/agreement.jsonl`` (one row per (item, seed)
key: the candidate against the baseline on the baseline's own output),
``arms/<arm>/probes.json`` and ``ab.json["scoring"]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from abgate.records.bench_sections import ProbeRecord
from abgate.records.documents import AbRecord, ScoringCost
from abgate.records.side_documents import ProbesDocument
from abgate.runner.documents import read_record, write_record

KL = float | Callable[[int, int], float]


def _top(token: int, logp: float) -> list[list[Any]]:
    rest = math.log(max(1e-9, (1.0 - math.exp(logp)) / 4.0))
    return [[token, logp], *[[token + 1000 + j, rest] for j in range(4)]]


def agreement_row(item: int, seed: int = 0, *, n_tokens: int = 20, kl: KL = 0.0,
                  disagree: Callable[[int, int], bool] = lambda item, pos: False,
                  p_base: float = 0.8, p_cand: float | None = None, method: str = "full",
                  k: int | None = None) -> dict[str, Any]:
    """One ``agreement.jsonl`` row. ``kl`` is a constant or ``f(item, position)``;
    ``disagree(item, position)`` makes the candidate's argmax differ there; the scored
    token has probability ``p_base`` under the baseline and ``p_cand`` (default: the
    same) under the candidate."""
    item_id = f"item-{item:04d}"
    tokens = [(item * 31 + seed + pos) % 500 for pos in range(n_tokens)]
    kls = [kl(item, pos) if callable(kl) else kl for pos in range(n_tokens)]
    flips = [disagree(item, pos) for pos in range(n_tokens)]
    top1_cand = [t + 1 if flip else t for t, flip in zip(tokens, flips, strict=True)]
    lb, lc = math.log(p_base), math.log(p_base if p_cand is None else p_cand)
    return {
        "key": f"{item_id}#{seed}", "item_id": item_id, "seed": seed,
        "source": "baseline_output", "method": method,
        "k": k if method == "top_k" else None,
        "tokens": tokens, "kl": kls, "top1_base": tokens, "top1_cand": top1_cand,
        "logp_base": [lb] * n_tokens, "logp_cand": [lc] * n_tokens,
        "top_base": [_top(t, lb) for t in tokens],
        "top_cand": [_top(t, lc) for t in top1_cand],
    }


def rows_for(items: Iterable[int], seeds: Iterable[int] = (0,), **kwargs: Any
             ) -> list[dict[str, Any]]:
    seed_list = list(seeds)
    return [agreement_row(i, s, **kwargs) for i in items for s in seed_list]


def aa_rows(n_items: int, seeds: Iterable[int] = (0,)) -> list[dict[str, Any]]:
    """Identical arms: KL exactly 0, same argmax and probabilities everywhere."""
    return rows_for(range(n_items), seeds)


def broken_rows(n_items: int, seeds: Iterable[int] = (0,), level: float = 2.0
                ) -> list[dict[str, Any]]:
    """A broken candidate (e.g. wrong RoPE): KL of about ``level`` nats, varying by item
    and position, and the argmax differs at two positions in three."""
    return rows_for(range(n_items), seeds,
                    kl=lambda i, p: level * (1.0 + 0.5 * math.sin(1.7 * i + 0.9 * p)),
                    disagree=lambda i, p: (i + p) % 3 != 0, p_cand=0.1)


def write_agreement(ab_dir: Path, arm: str, rows: Iterable[Mapping[str, Any]]) -> Path:
    path = ab_dir / "arms" / arm / "agreement.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_probes(ab_dir: Path, arm: str, results: Mapping[str, bool]) -> Path:
    """An arm's ``probes.json`` as the A/B writes it (through ``ProbesDocument`` and
    ``write_record``, so the real reader accepts it)."""
    path = ab_dir / "arms" / arm / "probes.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, ProbesDocument.new(probes=[
        ProbeRecord(name=name, passed=passed, reason="ok" if passed else f"{name}: wrong answer")
        for name, passed in results.items()]))
    return path


def write_scoring(ab_dir: Path, scoring: Mapping[str, Mapping[str, Any]]) -> None:
    """Add ``scoring`` to ``ab.json`` as the A/B scoring pass records it."""
    path = ab_dir / "ab.json"
    doc = read_record(path, "ab", model=AbRecord)
    doc.scoring = {arm: ScoringCost.model_validate(dict(cost)) for arm, cost in scoring.items()}
    write_record(path, doc)
