"""Balanced orders for matched A/B runs.

Interleaved (every arm resident): per (item, seed) pair the arms run in alternating
order, A B | B A | A B | ..., so slow drift of the machine (thermal, background load)
falls on both arms equally. Blocks (one arm resident at a time): groups of items
run arm by arm, alternating the arm order from block to block (A B | B A | ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

K = TypeVar("K")


def interleaved(keys: Sequence[K], arms: Sequence[str]) -> list[tuple[str, K]]:
    order: list[tuple[str, K]] = []
    for i, key in enumerate(keys):
        seq = arms if i % 2 == 0 else list(reversed(arms))
        order.extend((arm, key) for arm in seq)
    return order


def blocks(keys: Sequence[K], arms: Sequence[str], block: int
           ) -> list[tuple[str, list[K]]]:
    """``[(arm, keys_of_block), ...]`` with the arm order alternating per block."""
    out: list[tuple[str, list[K]]] = []
    for b, start in enumerate(range(0, len(keys), block)):
        chunk = list(keys[start:start + block])
        seq = arms if b % 2 == 0 else list(reversed(arms))
        out.extend((arm, chunk) for arm in seq)
    return out
