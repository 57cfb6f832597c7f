"""The fleet strategy of an A/B on Ray: items sharded over replica actors, never arms.

Both arms of an (item, seed) run on one replica, back to back, in an order drawn per
item from the seed (``matching.arm_order``). Results come back to this process, the
only writer of the A/B directory, through the dispatch loop (``fleet.dispatch``): in
key order, through the arms' own sample writers (appended, fsynced). A replica whose
actor or node died mid-item has written nothing of that item: it is re-queued on the
others, so every (item, seed, arm) ends exactly once, and the loss is recorded."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Hashable
from typing import Any

from abgate.ab.analyze import AGREEMENT_PASS
from abgate.ab.phases import gather_evidence
from abgate.ab.schedule import ArmSessions
from abgate.ab.state import RunState
from abgate.fleet.cluster import ClusterSpec, connected, in_bundle, placed, removed
from abgate.fleet.dispatch import (
    Dispatch,
    DispatchLog,
    ReplicaLost,
    Results,
    Work,
    earlier_sessions,
)
from abgate.fleet.matching import arm_order, check_matched, check_schedule
from abgate.fleet.ray_state import actor_states, alive_nodes
from abgate.fleet.remote_engine import ReplicaEngine
from abgate.fleet.replica import Replica
from abgate.records.fleet import FleetLoss, FleetRecord, ReplicaFacts
from abgate.runner.session import EngineSession

__all__ = ["Fleet", "FleetSchedule", "RayPool", "arm_order", "fleet_strategy"]
log = logging.getLogger("abgate.fleet")


class FleetSchedule:
    """The A/B's schedule (``ab.schedule.ScheduleStrategy``) on ``spec``'s cluster: the arms'
    engines are the replicas' own, so ``sessions`` (this process's) is not used."""

    name = "fleet"

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        check_schedule(state.exp)
        with connected(self.spec) as ray:
            Fleet(ray, self.spec, state).run()


def fleet_strategy(spec: ClusterSpec) -> FleetSchedule:
    return FleetSchedule(spec)


def actor_errors(ray: Any) -> tuple[type[BaseException], ...]:
    ex = ray.exceptions
    return (ex.RayActorError, ex.ActorDiedError, ex.ActorUnavailableError, ex.NodeDiedError,
            ex.WorkerCrashedError, ex.ObjectLostError, ex.OwnerDiedError)


class RayPool:
    """The dispatch loop's pool over replica actors (``dispatch.Pool``)."""

    def __init__(self, ray: Any, actors: list[Any], nodes: list[str]) -> None:
        self.ray, self.actors, self.nodes = ray, actors, nodes

    def submit(self, index: int, work: Work) -> Hashable:
        ref: Hashable = self.actors[index].run_item.remote(work)
        return ref

    def wait(self, handles: list[Hashable], timeout: float) -> list[Hashable]:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        return list(ready)

    def result(self, handle: Hashable) -> Results:
        try:
            results: Results = self.ray.get(handle, timeout=60)
        except actor_errors(self.ray) as exc:
            raise ReplicaLost(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                              ) from None
        return results

    def dead(self, indices: list[int]) -> dict[int, str]:
        """Replicas on a node Ray no longer counts alive (its raylet gone)."""
        alive = alive_nodes(self.ray)
        return {i: f"NodeDiedError: node {self.nodes[i][:12]} is no longer alive"
                for i in indices if self.nodes[i] not in alive}

    def drop(self, index: int) -> None:
        with contextlib.suppress(Exception):
            self.ray.kill(self.actors[index])

    def cancel(self, handles: list[Hashable]) -> None:
        for ref in handles:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)


class Fleet:
    """The replicas of one A/B session and the dispatch loop over them."""

    def __init__(self, ray: Any, spec: ClusterSpec, runner: RunState) -> None:
        self.ray, self.spec, self.runner = ray, spec, runner
        self.arms = list(runner.exp.arms)
        self.ledger = DispatchLog()
        self.pg: Any = None
        self.earlier = earlier_sessions(runner.doc.fleet)
        self.facts: list[ReplicaFacts] = []  # each replica's (fleet.replica.Replica.facts)
        self.found: dict[str, Any] = {}  # host differences, wall time, actors after close

    def start(self) -> list[Any]:
        """The replicas, loading their engines. Replicas given a fraction of a GPU start
        one after another: vLLM sizes its KV cache from the GPU memory free while it
        profiles, and two engines profiling at once on one GPU each count the other's
        memory (seen on the H200: "No available memory for the cache blocks" with two
        replicas of 0.5 GPU and both arms each)."""
        s = self.spec
        self.pg = pg = placed(self.ray, s)
        actor = self.ray.remote(max_restarts=0, max_task_retries=0)(Replica)
        prepared = {arm: self.runner.checked.prepared[arm].engine for arm in self.arms}
        warm = [(arm, self.runner.recorders[arm].request(i, sd))
                for i, sd in self.runner.keys()[: self.runner.exp.schedule.warmup]
                for arm in self.arms]
        replicas: list[Any] = []
        try:
            for i in range(s.replicas):
                replicas.append(actor.options(**in_bundle(s, pg, i)).remote(i, prepared, warm))
                if 0 < s.num_gpus < 1:  # replicas sharing a GPU load one after another
                    self.ray.get(replicas[-1].__ray_ready__.remote(), timeout=900)
        except BaseException:
            for r in replicas:
                with contextlib.suppress(Exception):
                    self.ray.kill(r)
            raise
        return replicas

    def run(self) -> None:
        try:
            replicas = self.start()
        except BaseException:
            self.remove_pg()
            raise
        try:
            facts = self.ray.get([r.facts.remote() for r in replicas], timeout=900)
            self.facts = facts
            self.found["host_differences"] = check_matched(facts,
                                                           self.spec.allow_host_differences)
            self.save()
            pool = RayPool(self.ray, replicas, [str(f.node_id) for f in facts])
            Dispatch(self.runner, pool, self.ledger, item_timeout_s=self.spec.item_timeout_s,
                     on_loss=self.save).run(
                list(range(len(replicas))))
            self.evidence(replicas)
        finally:
            self.found["dispatch_wall_s"] = round(self.ledger.wall_s, 6)
            self.close(replicas)
            self.remove_pg()
            self.save()

    def evidence(self, replicas: list[Any]) -> None:
        """The distribution-agreement pass and the probes, as on one machine: the pass
        spread over every replica still alive, each sample scored by both arms on one
        replica (both resident there: the scores of a pair never mix hardware), the rows
        written here in the samples' order; the probes on the first of them. Recorded:
        ``evidence_replica`` (the first), ``agreement_by_replica`` (samples scored), a
        replica lost meanwhile among ``lost`` (its samples scored on the others)."""
        ev = self.runner.exp.evidence
        if not (ev.agreement or ev.probes):
            return
        lost = {x.replica for x in self.ledger.lost}
        live = [i for i in range(len(replicas)) if i not in lost]
        prepared = self.runner.checked.prepared
        places = [{arm: EngineSession(prepared[arm].engine,
                                      ReplicaEngine(self.ray, replicas[i], arm))
                   for arm in self.arms} for i in live]
        self.found["evidence_replica"] = live[0]
        scored_by = gather_evidence(self.runner, places[0], places[1:])
        self.found["agreement_by_replica"] = {live[p]: n for p, n in scored_by.per_place.items()}
        for p, why in scored_by.lost:  # its sample was scored on another
            self.ledger.lost.append(FleetLoss(replica=live[p], at=AGREEMENT_PASS,
                                              error=why, time=time.time()))

    def remove_pg(self) -> None:
        removed(self.pg)
        self.pg = None

    def record(self) -> FleetRecord:
        """``ab.json``'s ``fleet`` as it stands (``records.fleet``)."""
        return FleetRecord(cluster=self.spec.record(), replicas=self.facts,
                           lost=self.ledger.lost, items_by_replica=self.ledger.items_by_replica,
                           earlier=self.earlier, **self.found)

    def save(self) -> None:
        self.runner.doc.fleet = self.record()
        self.runner.save()

    def close(self, replicas: list[Any]) -> None:
        lost = {x.replica for x in self.ledger.lost}
        closing = {i: r.close.remote() for i, r in enumerate(replicas) if i not in lost}
        for i in range(len(replicas)):
            try:
                evidence = self.ray.get(closing[i], timeout=300) if i in closing else {
                    "error": "lost (its node took its processes)"}
            except Exception as exc:  # lost while closing
                evidence = {"error": type(exc).__name__}
            evidence["busy_s"] = round(self.ledger.busy.get(i, 0.0), 6)
            if i < len(self.facts):
                self.facts[i].closed = evidence
        for r in replicas:
            self.ray.kill(r)
        ids = [str(f.actor_id) for f in self.facts if f.actor_id]
        self.found["actors_after_close"] = actors_left(ids) if not self.spec.address.startswith(
            "local") else {"checked": False, "error": "a local cluster has no state API (no "
                           "dashboard): its processes are reaped (fleet.reaper)"}


def actors_left(actor_ids: list[str], wait_s: float = 30.0) -> dict[str, Any]:
    """The replicas' actors once killed, as Ray's state API sees them (the GCS actor
    table where the state API's dashboard server is not running): those not DEAD within
    ``wait_s`` (``alive``: none when cleanup held)."""
    import time

    deadline, api = time.monotonic() + wait_s, True
    while True:
        try:
            states, via = actor_states(actor_ids, api)
            api = via.startswith("ray.util.state")  # asked once when it cannot answer
        except Exception as exc:
            return {"checked": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        alive = sorted(a for a in actor_ids if states.get(a, "DEAD") != "DEAD")
        if not alive or time.monotonic() > deadline:
            return {"checked": True, "via": via, "alive": alive}
        time.sleep(0.5)
