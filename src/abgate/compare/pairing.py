"""Match the samples of two arms by key into (item, seed) pairs.

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

__all__ = ["Pair", "Pairing", "Sampled", "pair_samples"]

Sample = Mapping[str, Any]


def _section(sample: Sample, name: str) -> Mapping[str, Any]:
    value = sample.get(name)
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Sampled:
    """The fields of one ``samples.jsonl`` record that compare/ reads, taken once by
    :meth:`of` (the one place this layer reads a sample's keys)."""

    key: Any
    item_id: Any
    seed: Any
    warmup: bool
    correct: Any  # True/False, None when unscored
    finish_reason: Any
    health: Mapping[str, Any]
    timing: Mapping[str, Any]
    output_tokens: Any
    token_ids: Any
    output_sha: Any
    prompt_sha: Any
    prompt_tokens: Any
    finished_at: Any
    random_weights: bool

    @classmethod
    def of(cls, sample: Sample) -> Sampled:
        output, prompt = _section(sample, "output"), _section(sample, "prompt")
        return cls(
            key=sample.get("key"), item_id=sample.get("item_id"), seed=sample.get("seed"),
            warmup=bool(sample.get("warmup", False)), correct=sample.get("correct"),
            finish_reason=sample.get("finish_reason"), health=_section(sample, "health"),
            timing=_section(sample, "timing"), output_tokens=output.get("tokens"),
            token_ids=output.get("token_ids"), output_sha=output.get("sha256"),
            prompt_sha=prompt.get("sha256"), prompt_tokens=prompt.get("tokens"),
            finished_at=sample.get("finished_at"),
            random_weights=bool(sample.get("random_weights")))

    @property
    def errored(self) -> bool:
        """True when the engine failed on this request (never scored as a wrong answer)."""
        return self.finish_reason == "error" or bool(self.health.get("error", False))

    def health_value(self, name: str) -> Any:
        """A field of the sample's ``health``, falling back to the finish reason."""
        if name in self.health:
            return self.health[name]
        reason = self.finish_reason
        fallback: dict[str, Any] = {
            "truncated": reason == "length",
            "natural_stop": reason == "stop",
            "invalid": False,
            "error": reason == "error",
        }
        return fallback.get(name)


@dataclass(frozen=True)
class Pair:
    """The two arms' samples for one (item, seed)."""

    key: str
    item_id: str
    seed: int | None
    a: Sampled
    b: Sampled

    @property
    def errored(self) -> bool:
        return self.a.errored or self.b.errored


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


def _key(sample: Sampled, index: int, arm: str) -> str:
    key = sample.key
    if key is None and sample.item_id is not None:
        key = f"{sample.item_id}#{0 if sample.seed is None else sample.seed}"
    if key is None:
        raise AbgateError(f"arm {arm}: sample {index} has neither 'key' nor 'item_id'")
    return str(key)


def _by_key(samples: Sequence[Sample], arm: str) -> dict[str, Sampled]:
    found: dict[str, Sampled] = {}
    for index, raw in enumerate(samples):
        sample = Sampled.of(raw)
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


def _item_id(key: str, sample: Sampled) -> str:
    item = sample.item_id
    return str(item) if item is not None else key.rsplit("#", 1)[0]


def pair_samples(
    a: Sequence[Sample],
    b: Sequence[Sample],
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
