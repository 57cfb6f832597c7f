"""Balanced orders for matched A/B runs.

Interleaved (every arm resident): per (item, seed) pair the arms run in alternating
order, A B | B A | A B | ..., so slow drift of the machine (thermal, background load)
falls on both arms equally. Blocks (one arm resident at a time): groups of items
run arm by arm, alternating the arm order from block to block (A B | B A | ...).

The strategies that follow these orders are :class:`ScheduleStrategy` strategies
(``ab.strategies``); they get their engines from an :class:`ArmSessions` provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from abgate.ab.state import RunState
    from abgate.runner.session import EngineSession

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


class ArmSessions(Protocol):
    """What a schedule asks for an arm's engine: ``open`` loads ``arm`` for the life
    of ``stack`` (its provenance recorded, its prompt checked, warmed up unless
    ``warm`` is False). The local provider loads in this process
    (``ab.strategies.LocalSessions``); another may build each arm from its own source
    revision, or hand the arm to a replica."""

    def open(self, arm: str, stack: ExitStack, warm: bool = True) -> EngineSession: ...


class ScheduleStrategy(Protocol):
    """A strategy that runs the keys not yet done of every arm of ``state``.

    It reads the run state (``state.keys()``, ``state.todo(arm)``, ``state.is_done``,
    ``state.arms``, ``state.policy``), gets engines from ``sessions`` and hands every
    measured result to the one writer path, ``ab.phases.write_sample`` (or
    ``phases.run_one``, which generates and writes); only the process holding
    ``state`` writes the A/B directory. A distributed schedule generates on its
    replicas and writes the returned raw results here, re-queueing the keys a lost
    replica had in flight (``write_sample`` is keyed by (arm, item, seed))."""

    name: str

    def run(self, state: RunState, sessions: ArmSessions) -> None: ...
