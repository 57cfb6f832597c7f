"""The distribution-agreement section of a comparison (``comparison.json``'s
``agreement``, computed by ``compare.agreement``): KL divergence, top-1 agreement and
delta-p between the arms' next-token distributions, the largest positions and items,
and each arm's scoring cost."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from abgate.records.result import Bounds, Result


class RatioStat(Result):
    estimate: float | None = None
    se: float | None = None
    df: int | None = None
    ci: Bounds | None = None
    confidence: float | None = None


class KlPercentiles(Result):
    median: float | None = None
    p90: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    max: float | None = None


class DpPercentiles(Result):
    min: float | None = None
    p01: float | None = None
    p05: float | None = None
    p10: float | None = None
    median: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


class DeltaP(Result):
    mean: RatioStat = Field(default_factory=RatioStat)
    rms: float | None = None
    n_tokens: int | None = None
    percentiles: DpPercentiles = Field(default_factory=DpPercentiles)


class Histogram(Result):
    edges: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    below: int | None = None
    above: int | None = None
    unit: str | None = None


class Position(Result):
    key: str | None = None
    item_id: str | None = None
    position: int | None = None
    kl: float | None = None
    token: Any = None
    top1_base: Any = None
    top1_cand: Any = None
    delta_p: float | None = None
    top_base: list[list[Any]] | None = None  # [token_id, logprob(, text)]
    top_cand: list[list[Any]] | None = None


class WorstItem(Result):
    item_id: str | None = None
    n_tokens: int | None = None
    mean_kld: float | None = None
    max_kl: float | None = None
    top1_agreement: float | None = None


class ScoringOverhead(Result):
    """One arm's scoring pass (from ab.json's ``scoring``) against its generation."""

    scoring_seconds: float | None = None
    n_tokens: int | None = None
    max_tokens_per_sequence: int | None = None
    n_sequences: int | None = None
    prompts_restored: int | None = None
    method: str | None = None
    generation_seconds: float | None = None
    scoring_over_generation: float | None = None


class Agreement(Result):
    """The agreement section: measured, or not with the ``reason``."""

    measured: bool = False
    reason: str | None = None
    method: str | None = None
    k: int | None = None
    approximate: bool | None = None
    source: str | None = None
    n_rows: int | None = None
    n_skipped: int | None = None
    n_duplicate_keys: int | None = None
    n_empty: int | None = None
    problems: tuple[str, ...] = ()
    n_keys: int | None = None
    n_items: int | None = None
    n_tokens: int | None = None
    n_nonfinite_kl: int | None = None
    n_negative_kl: int | None = None
    kl_cap: float | None = None
    mean_kld: RatioStat = Field(default_factory=RatioStat)
    kl_percentiles: KlPercentiles = Field(default_factory=KlPercentiles)
    zero_kl_fraction: float | None = None
    top1_agreement: RatioStat = Field(default_factory=RatioStat)
    delta_p: DeltaP = Field(default_factory=DeltaP)
    histogram: Histogram = Field(default_factory=Histogram)
    largest_positions: tuple[Position, ...] = ()
    largest_items: tuple[WorstItem, ...] = ()
    cost: dict[str, ScoringOverhead] = Field(default_factory=dict)
