"""Items, suites and deterministic selection."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abgate.errors import UsageError
from abgate.scoring.text import TextScorer


@dataclass(frozen=True)
class Item:
    """One evaluation item: an exact integer reference answer, or (``scorer`` set: the
    generic suite) a text answer scored by exact match or a regex, its ``question`` then
    the whole prompt."""

    id: str
    question: str
    answer: int
    solution: str | None = None
    scorer: TextScorer | None = None


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its items plus what identifies the data they came from."""

    name: str
    items: tuple[Item, ...]
    source: str  # file path, hub id or generator description
    data_sha256: str | None  # SHA-256 of the data file where there is one


def content_id(prefix: str, question: str) -> str:
    """A stable item ID from the question text (survives reordering and subsetting)."""
    return f"{prefix}-{hashlib.sha256(question.encode()).hexdigest()[:12]}"


def select_items(
    items: Sequence[Item], limit: int | None = None, sample: int | None = None,
    sample_seed: int = 0,
) -> list[Item]:
    """``limit``: the first N items. ``sample``: N items drawn without replacement with
    a seeded generator, returned in dataset order. Never both."""
    if limit is not None and sample is not None:
        raise UsageError("--limit and --sample are mutually exclusive")
    for flag, n in (("--limit", limit), ("--sample", sample)):
        if n is not None and n < 1:
            raise UsageError(f"{flag} must be >= 1, got {n}")
    if not items:
        raise UsageError("the suite has no items")
    if limit is not None:
        return list(items[:limit])
    if sample is not None:
        if sample > len(items):
            raise UsageError(f"--sample {sample} exceeds the {len(items)} items in the suite")
        rng = np.random.default_rng(sample_seed)
        picked = sorted(rng.choice(len(items), size=sample, replace=False).tolist())
        return [items[i] for i in picked]
    return list(items)


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; duplicates and junk are usage errors."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            seeds.append(int(part))
        except ValueError:
            raise UsageError(f"--seeds: {part!r} is not an integer (expected e.g. 0,1,2)") from None
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds has duplicates: {text}")
    return seeds
