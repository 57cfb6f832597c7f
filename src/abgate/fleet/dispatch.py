"""The dispatch loop of a fleet A/B, over any pool of replicas (Ray actors, or threads
that each drive one OpenAI-compatible endpoint).

Keys (item, seed) go to idle replicas in the A/B's own key order; results come back in
any order and are written in key order (a reorder buffer), so the samples streams are
those one machine writes and sequential looks fall on item boundaries of the same
merged stream. A replica lost mid-item (its actor, node or endpoint gone) has written
nothing of that item: the key goes back to the front of the queue, so every
(item, seed, arm) ends exactly once. Waits are bounded: every ``poll_s`` without a
result the pool is asked which replicas are still alive."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from abgate.ab.phases import write_sample
from abgate.ab.state import Key, RunState
from abgate.ab.strategies import capped, look
from abgate.engines.base import GenerationRequest, GenerationResult
from abgate.errors import AbgateError
from abgate.fleet.matching import arm_order
from abgate.records import documents as docs
from abgate.records.fleet import FleetLoss, FleetRecord, FleetSession
from abgate.records.samples import sample_key

log = logging.getLogger("abgate.fleet")
Work = list[tuple[str, GenerationRequest]]
Results = list[tuple[str, GenerationResult]]


class ReplicaLost(Exception):
    """A replica that will answer no more (its actor, node or endpoint is gone)."""


class Pool(Protocol):
    """Replicas by index: ``submit`` one item's work, ``wait`` (bounded) for handles,
    ``result`` of a finished handle (raises :class:`ReplicaLost`), ``dead`` among the
    given replicas (asked when a wait ends empty), ``drop`` a replica given up on (no
    result within the item timeout), ``cancel`` what is left."""

    def submit(self, index: int, work: Work) -> Hashable: ...
    def wait(self, handles: list[Hashable], timeout: float) -> list[Hashable]: ...
    def result(self, handle: Hashable) -> Results: ...
    def dead(self, indices: list[int]) -> dict[int, str]: ...
    def drop(self, index: int) -> None: ...
    def cancel(self, handles: list[Hashable]) -> None: ...


@dataclass
class DispatchLog:
    """What the record keeps of the dispatch: losses, items per replica, busy time."""

    lost: list[FleetLoss] = field(default_factory=list)
    items_by_replica: dict[str, list[str]] = field(default_factory=dict)
    busy: dict[int, float] = field(default_factory=dict)
    wall_s: float = 0.0  # the loop's own wall time, first submit to last write


@dataclass
class Flight:
    index: int
    key: Key
    started: float


def earlier_sessions(previous: FleetRecord | None) -> list[FleetSession]:
    """A resumed fleet A/B's earlier sessions (each its replicas, items and losses),
    to keep in the new session's record: their replicas are other clusters."""
    if previous is None:
        return []
    return [*(previous.earlier or []), previous.session()]


class Dispatch:
    """One run of the loop: ``run(replicas)`` returns when every key is written, or a
    sequential look decided every verdict."""

    def __init__(self, state: RunState, pool: Pool, ledger: DispatchLog, *,
                 poll_s: float = 5.0, item_timeout_s: float | None = None,
                 on_loss: Any = None) -> None:
        self.state, self.pool, self.ledger = state, pool, ledger
        self.poll_s, self.item_timeout_s, self.on_loss = poll_s, item_timeout_s, on_loss
        self.arms = list(state.exp.arms)
        sched = state.exp.schedule
        self.sequential = bool(sched.sequential)
        keys = state.keys()
        self.keys = capped(keys, sched.max_items) if self.sequential else keys
        self.look_every = int(sched.look_every or 1)
        if self.sequential:  # the section ab.strategies.run_sequential starts, the same
            doc = state.doc
            doc.sequential = docs.AbSequential(
                look_every=sched.look_every, max_items=len({i.id for i, _ in self.keys}),
                looks=doc.sequential.looks if doc.sequential else [], stopped_at=None)
        self.ready: dict[int, tuple[int, Results]] = {}
        self.cursor = self.n_items = 0

    def done(self, key: Key) -> bool:
        return all(self.state.is_done(arm, key[0], key[1]) for arm in self.arms)

    def run(self, replicas: list[int]) -> None:
        position = {sample_key(i.id, s): n for n, (i, s) in enumerate(self.keys)}
        queue = deque(k for k in self.keys if not self.done(k))
        inflight: dict[Hashable, Flight] = {}
        idle, alive = set(replicas), set(replicas)
        t0 = time.monotonic()
        try:
            self.loop(queue, inflight, idle, alive, position)
        finally:
            self.ledger.wall_s += time.monotonic() - t0

    def loop(self, queue: deque[Key], inflight: dict[Hashable, Flight], idle: set[int],
             alive: set[int], position: dict[str, int]) -> None:
        while not self.flush():
            for index in sorted(idle):
                if queue:
                    key = queue.popleft()
                    inflight[self.pool.submit(index, self.work(key))] = Flight(
                        index, key, time.monotonic())
                    idle.discard(index)
            if not inflight:
                raise AbgateError("every replica of the fleet was lost; "
                                  f"{len(queue)} item(s) left: --resume on a new cluster")
            got = self.pool.wait(list(inflight), self.poll_s)
            if not got:
                self.check_dead(inflight, alive, idle, queue)
            for handle in got:
                flight = inflight.pop(handle)
                try:
                    results = self.pool.result(handle)
                except ReplicaLost as exc:
                    self.lose(flight, str(exc), alive, idle, queue)
                    continue
                self.ledger.busy[flight.index] = (self.ledger.busy.get(flight.index, 0.0)
                                                  + time.monotonic() - flight.started)
                k = sample_key(flight.key[0].id, flight.key[1])
                self.ready[position[k]] = (flight.index, results)
                if flight.index in alive:
                    idle.add(flight.index)
        self.pool.cancel(list(inflight))  # a sequential stop: nothing of these written

    def work(self, key: Key) -> Work:
        item, seed = key
        return [(arm, self.state.recorders[arm].request(item, seed))
                for arm in arm_order(self.arms, item.id, seed)]

    def check_dead(self, inflight: dict[Hashable, Flight], alive: set[int], idle: set[int],
                   queue: deque[Key]) -> None:
        dead = self.pool.dead(sorted({f.index for f in inflight.values()}))
        limit, now = self.item_timeout_s, time.monotonic()
        for flight in inflight.values():
            if limit and flight.index not in dead and now - flight.started > limit:
                dead[flight.index] = f"no result within the item timeout ({limit:g} s)"
                self.pool.drop(flight.index)
        for handle, flight in list(inflight.items()):
            if flight.index in dead:
                del inflight[handle]
                self.lose(flight, dead[flight.index], alive, idle, queue)

    def lose(self, flight: Flight, why: str, alive: set[int], idle: set[int],
             queue: deque[Key]) -> None:
        item, seed = flight.key
        at = sample_key(item.id, seed)
        log.warning("replica %d lost at %s: %s", flight.index, at, why)
        self.ledger.lost.append(FleetLoss(replica=flight.index, at=at,
                                          error=why.splitlines()[0][:300] if why else "lost",
                                          time=time.time()))
        alive.discard(flight.index)
        idle.discard(flight.index)
        queue.appendleft(flight.key)  # nothing of it was written: it runs once, elsewhere
        if self.on_loss is not None:
            self.on_loss()

    def flush(self) -> bool:
        """Write what is ready in key order; True when the run is over (every key
        written, or a sequential look stopped it)."""
        while self.cursor < len(self.keys):
            item, seed = key = self.keys[self.cursor]
            if not self.done(key):
                if self.cursor not in self.ready:
                    return False
                index, results = self.ready.pop(self.cursor)
                self.write(index, key, results)
            self.cursor += 1
            last = self.cursor == len(self.keys)
            if not last and self.keys[self.cursor][0].id == item.id:
                continue  # the item is complete when the next key is another item's
            self.n_items += 1
            if self.sequential and (self.n_items % self.look_every == 0 or last) and look(
                    self.state, {}, self.n_items):
                return True
        return True

    def write(self, index: int, key: Key, results: Results) -> None:
        item, seed = key
        for arm, result in results:  # the one writer path, as on one machine
            if not self.state.is_done(arm, item, seed):
                write_sample(self.state, arm, item, seed, result)
        self.ledger.items_by_replica.setdefault(str(index), []).append(
            sample_key(item.id, seed))
