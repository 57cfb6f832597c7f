"""Match the samples of two arms (``records.samples.Sample`` models, or parsed lines
read into them) by key into (item, seed) pairs.

Warm-up samples are dropped. A key that appears in only one arm is an error unless
``allow_unmatched`` is set (then it is counted and left out). A pair where either side
finished with an engine error is kept in :attr:`Pairing.pairs` (it counts towards the
error-rate delta) but left out of every quality, speed and diagnostic statistic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from abgate.errors import AbgateError
from abgate.records.samples import Sample

__all__ = ["Pair", "Pairing", "SampleLike", "pair_samples"]

SampleLike = Sample | Mapping[str, Any]  # the model, or a parsed samples.jsonl line


@dataclass(frozen=True)
class Pair:
    """The two arms' samples for one (item, seed)."""

    key: str
    item_id: str
    seed: int | None
    a: Sample
    b: Sample

    @property
    def errored(self) -> bool:
        return self.a.failed or self.b.failed


@dataclass(frozen=True)
class Pairing:
    """Matched pairs (sorted by key) and the keys found in one arm only."""

    pairs: tuple[Pair, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]

    @property
    def live(self) -> tuple[Pair, ...]:
        """Pairs where neither side errored."""
        return tuple(p for p in self.pairs if not p.errored)

    @property
    def n_excluded_errors(self) -> int:
        return sum(1 for p in self.pairs if p.errored)


def _key(sample: Sample, index: int, arm: str) -> str:
    key = sample.key
    if key is None and sample.item_id is not None:
        key = f"{sample.item_id}#{0 if sample.seed is None else sample.seed}"
    if key is None:
        raise AbgateError(f"arm {arm}: sample {index} has neither 'key' nor 'item_id'")
    return str(key)


def _by_key(samples: Sequence[SampleLike], arm: str) -> dict[str, Sample]:
    found: dict[str, Sample] = {}
    for index, raw in enumerate(samples):
        sample = Sample.of(raw, f"arm {arm}: sample {index}")
        if sample.warmup:
            continue
        key = _key(sample, index, arm)
        if key in found:
            raise AbgateError(f"arm {arm}: key {key!r} appears more than once")
        found[key] = sample
    return found


def _few(keys: Sequence[str], n: int = 3) -> str:
    shown = ", ".join(repr(k) for k in keys[:n])
    return shown + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _item_id(key: str, sample: Sample) -> str:
    item = sample.item_id
    return str(item) if item is not None else key.rsplit("#", 1)[0]


def pair_samples(
    a: Sequence[SampleLike],
    b: Sequence[SampleLike],
    *,
    arm_names: tuple[str, str] = ("A", "B"),
    allow_unmatched: bool = False,
) -> Pairing:
    """Pair non-warm-up samples by ``key``; raise :class:`AbgateError` on unmatched keys."""
    by_a, by_b = _by_key(a, arm_names[0]), _by_key(b, arm_names[1])
    only_a = sorted(set(by_a) - set(by_b))
    only_b = sorted(set(by_b) - set(by_a))
    if (only_a or only_b) and not allow_unmatched:
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} only in {arm_names[0]} ({_few(only_a)})")
        if only_b:
            parts.append(f"{len(only_b)} only in {arm_names[1]} ({_few(only_b)})")
        raise AbgateError("arms are not matched: keys " + "; ".join(parts))
    pairs = []
    for key in sorted(set(by_a) & set(by_b)):
        sa, sb = by_a[key], by_b[key]
        seed = sa.seed
        pairs.append(Pair(key, _item_id(key, sa), None if seed is None else int(seed), sa, sb))
    if not pairs:
        raise AbgateError("no matched (item, seed) pairs to compare")
    return Pairing(tuple(pairs), tuple(only_a), tuple(only_b))
