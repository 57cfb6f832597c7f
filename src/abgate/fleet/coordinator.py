"""The fleet strategy of an A/B: items sharded over replicas, never arms.

Both arms of an (item, seed) run on one replica, back to back, in an order drawn per
item from the seed. Results come back to this process, the only writer of the A/B
directory, and go through the arms' own sample writers (appended, fsynced). A replica
lost mid-item (its actor or its node died) leaves nothing of that item written: the
item is re-queued on the others, so every (item, seed, arm) ends exactly once."""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import deque
from typing import Any

from abgate.ab.phases import write_sample
from abgate.ab.schedule import ArmSessions
from abgate.ab.state import RunState
from abgate.errors import AbgateError
from abgate.fleet.cluster import ClusterSpec, connected
from abgate.fleet.matching import check_matched
from abgate.fleet.replica import Replica
from abgate.records.samples import sample_key
from abgate.suites import Item

log = logging.getLogger("abgate.fleet")
Key = tuple[Item, int]


def arm_order(arms: list[str], item_id: str, seed: int) -> list[str]:
    """The arms of one item in an order drawn from (item, seed): reproducible."""
    digest = hashlib.sha256(f"{item_id}\0{seed}".encode()).digest()
    order = list(arms)
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


class FleetSchedule:
    """The A/B's schedule (``ab.schedule.ScheduleStrategy``) on ``spec``'s cluster: the arms'
    engines are the replicas' own, so ``sessions`` (this process's) is not used."""

    name = "fleet"

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        with connected(self.spec) as ray:
            Fleet(ray, self.spec, state).run()


def fleet_strategy(spec: ClusterSpec) -> FleetSchedule:
    return FleetSchedule(spec)


def actor_errors(ray: Any) -> tuple[type[BaseException], ...]:
    ex = ray.exceptions
    return (ex.RayActorError, ex.ActorDiedError, ex.ActorUnavailableError, ex.NodeDiedError,
            ex.WorkerCrashedError)


class Fleet:
    """The replicas of one A/B session and the dispatch loop over them."""

    def __init__(self, ray: Any, spec: ClusterSpec, runner: RunState) -> None:
        self.ray, self.spec, self.runner = ray, spec, runner
        self.arms = list(runner.exp.arms)
        self.lost: list[dict[str, Any]] = []
        self.record: dict[str, Any] = {"cluster": spec.to_dict(), "replicas": [],
                                       "lost": self.lost, "items_by_replica": {}}
        self.busy: dict[int, float] = {}

    def start(self) -> list[Any]:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        s = self.spec
        bundle: dict[str, float] = {"CPU": s.num_cpus, **s.resources}
        if s.num_gpus:
            bundle["GPU"] = s.num_gpus
        pg = placement_group([dict(bundle) for _ in range(s.replicas)],
                             strategy="PACK" if s.placement == "pack" else "SPREAD")
        self.ray.get(pg.ready(), timeout=600)
        actor = self.ray.remote(max_restarts=0, max_task_retries=0)(Replica)
        prepared = {arm: self.runner.checked.prepared[arm].engine for arm in self.arms}
        warm = [(arm, self.runner.recorders[arm].request(i, sd))
                for i, sd in self.runner.keys()[: self.runner.exp.schedule.warmup]
                for arm in self.arms]
        return [actor.options(num_cpus=s.num_cpus, num_gpus=s.num_gpus or None,
                              resources=s.resources or None,
                              scheduling_strategy=PlacementGroupSchedulingStrategy(
                                  pg, placement_group_bundle_index=i)
                              ).remote(i, prepared, warm)
                for i in range(s.replicas)]

    def run(self) -> None:
        replicas = self.start()
        try:
            facts = self.ray.get([r.facts.remote() for r in replicas], timeout=900)
            self.record["replicas"] = facts
            self.record["host_differences"] = check_matched(facts,
                                                            self.spec.allow_host_differences)
            self.save()
            self.dispatch(dict(enumerate(replicas)))
        finally:
            self.close(replicas)
            self.save()

    def save(self) -> None:
        self.runner.doc.fleet = self.record
        self.runner.save()

    def todo(self) -> deque[Key]:
        state = self.runner
        keys = state.keys()  # RunState.keys(): a method, not a dict
        return deque((i, s) for i, s in keys
                     if not all(state.is_done(arm, i, s) for arm in self.arms))

    def submit(self, index: int, replica: Any, key: Key) -> Any:
        item, seed = key
        work = [(arm, self.runner.recorders[arm].request(item, seed))
                for arm in arm_order(self.arms, item.id, seed)]
        self.busy.setdefault(index, 0.0)
        return replica.run_item.remote(work)

    def dispatch(self, alive: dict[int, Any]) -> None:
        queue, inflight = self.todo(), dict[Any, tuple[int, Key]]()
        started: dict[Any, float] = {}
        idle = set(alive)
        while queue or inflight:
            for index in sorted(idle):
                if queue:
                    ref = self.submit(index, alive[index], key := queue.popleft())
                    inflight[ref], started[ref] = (index, key), time.monotonic()
                    idle.discard(index)
            if not inflight:
                raise AbgateError("every replica of the fleet was lost; "
                                  f"{len(queue)} item(s) left: --resume on a new cluster")
            [ref], _ = self.ray.wait(list(inflight), num_returns=1)
            index, key = inflight.pop(ref)
            try:
                results = self.ray.get(ref)
            except actor_errors(self.ray) as exc:
                self.lose(index, key, exc, alive, idle, queue)
                continue
            self.busy[index] += time.monotonic() - started.pop(ref)
            self.write(index, key, results)
            idle.add(index)

    def lose(self, index: int, key: Key, exc: BaseException, alive: dict[int, Any],
             idle: set[int], queue: deque[Key]) -> None:
        item, seed = key
        log.warning("replica %d lost at %s: %s", index, sample_key(item.id, seed),
                    type(exc).__name__)
        self.lost.append({"replica": index, "at": sample_key(item.id, seed),
                          "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                          "time": time.time()})
        alive.pop(index, None)
        idle.discard(index)
        queue.appendleft(key)  # nothing of it was written: it runs once, elsewhere
        self.save()

    def write(self, index: int, key: Key, results: list[tuple[str, Any]]) -> None:
        item, seed = key
        k = sample_key(item.id, seed)
        for arm, result in results:  # the one writer path, as on one machine
            if not self.runner.is_done(arm, item, seed):
                write_sample(self.runner, arm, item, seed, result)
        by = self.record["items_by_replica"]
        by.setdefault(str(index), []).append(k)

    def close(self, replicas: list[Any]) -> None:
        closing = {i: r.close.remote() for i, r in enumerate(replicas)}
        for i, ref in closing.items():
            try:
                evidence = self.ray.get(ref, timeout=300)
            except Exception as exc:  # a lost replica: its node took its processes
                evidence = {"error": type(exc).__name__}
            evidence["busy_s"] = round(self.busy.get(i, 0.0), 6)
            if i < len(self.record["replicas"]):
                self.record["replicas"][i]["closed"] = evidence
        for r in replicas:
            self.ray.kill(r)
