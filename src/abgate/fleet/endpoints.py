"""A fleet without Ray: ``abgate ab FILE --endpoint URL --endpoint URL ...``, the
OpenAI-compatible servers a user already runs (e.g. behind Kubernetes), one endpoint
per replica.

Every arm is an ``openai`` arm; its endpoints are all of them (so the record names the
fleet), and the schedule gives replica ``i`` its own session per arm on endpoint ``i``
alone. Items are sharded as on Ray (``fleet.dispatch``): both arms of an item on one
endpoint, a thread per endpoint, this process the only writer. An endpoint that stops
answering mid-item (``ServerGone``) is lost: its item runs again on the others."""

from __future__ import annotations

from collections.abc import Hashable
from concurrent import futures
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from abgate.ab.experiment import Experiment
from abgate.ab.schedule import ArmSessions
from abgate.ab.state import RunState
from abgate.engines import keys
from abgate.engines.openai.endpoints import ServerGone
from abgate.errors import UsageError
from abgate.fleet.dispatch import (
    Dispatch,
    DispatchLog,
    ReplicaLost,
    Results,
    Work,
    earlier_sessions,
)
from abgate.fleet.matching import check_matched, check_schedule
from abgate.fleet.replica import Replica
from abgate.records.fleet import FleetRecord, ReplicaFacts
from abgate.runner.session import PreparedEngine


def with_endpoints(exp: Experiment, urls: list[str]) -> Experiment:
    """``exp`` with every arm's endpoints set to ``urls``; refused (one line) unless
    every arm is an ``openai`` arm on servers the user runs, with no env of its own."""
    if len(set(urls)) != len(urls):
        raise UsageError(f"--endpoint: a URL given twice ({urls}); one per replica")
    for name, arm in exp.arms.items():
        if arm.engine != "openai":
            raise UsageError(f"--endpoint with a file: arm {name!r} runs engine "
                             f"{arm.engine!r}; an endpoint fleet needs engine = \"openai\"")
        if keys.launches(arm.engine_options):
            raise UsageError(f"--endpoint: arm {name!r} launches its own server (launch); "
                             "an endpoint fleet runs on the servers you give")
        if arm.env:
            raise UsageError(f"--endpoint: arm {name!r} sets env; the servers you run "
                             "keep their own environment")
    arms = {name: replace(arm, engine_options={**arm.engine_options, "endpoints": list(urls)})
            for name, arm in exp.arms.items()}
    return replace(exp, arms=arms)


def on_endpoint(p: PreparedEngine, url: str) -> PreparedEngine:
    return replace(p, spec=replace(p.spec, options={**p.spec.options, "endpoints": [url]}))


class ThreadPool:
    """The dispatch loop's pool over in-process replicas, a thread each."""

    def __init__(self, executor: futures.ThreadPoolExecutor, replicas: list[Replica]) -> None:
        self.executor, self.replicas = executor, replicas

    def submit(self, index: int, work: Work) -> Hashable:
        return self.executor.submit(self.replicas[index].run_item, work)

    def wait(self, handles: list[Hashable], timeout: float) -> list[Hashable]:
        done, _ = futures.wait([h for h in handles if isinstance(h, futures.Future)],
                               timeout=timeout, return_when=futures.FIRST_COMPLETED)
        return list(done)

    def result(self, handle: Hashable) -> Results:
        assert isinstance(handle, futures.Future)
        try:
            results: Results = handle.result()
        except ServerGone as exc:
            raise ReplicaLost(f"ServerGone: {str(exc).splitlines()[0][:200]}") from None
        return results

    def dead(self, indices: list[int]) -> dict[int, str]:
        return {}  # a lost endpoint shows as ServerGone on its request

    def drop(self, index: int) -> None:
        pass  # a thread cannot be stopped: its request ends at the engine's own timeout

    def cancel(self, handles: list[Hashable]) -> None:
        for h in handles:
            if isinstance(h, futures.Future):
                h.cancel()


class EndpointFleet:
    """The A/B's schedule over ``urls`` (``ab.schedule.Schedule``)."""

    name = "endpoints"

    def __init__(self, urls: list[str], allowed: tuple[str, ...] = ()) -> None:
        self.urls, self.allowed = list(urls), allowed

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        check_schedule(state.exp)
        ledger = DispatchLog()
        earlier = earlier_sessions(state.doc.fleet)
        facts: list[ReplicaFacts] = []  # each replica's engine facts
        found: dict[str, Any] = {}  # the host differences, the dispatch's wall time

        def save() -> None:
            state.doc.fleet = FleetRecord(endpoints=self.urls, replicas=facts, lost=ledger.lost,
                                          items_by_replica=ledger.items_by_replica,
                                          earlier=earlier, **found)
            state.save()

        warm = [(arm, state.recorders[arm].request(i, sd))
                for i, sd in state.keys()[: state.exp.schedule.warmup] for arm in state.arms]
        with ExitStack() as stack:
            replicas = [self.replica(stack, state, i, url, warm)
                        for i, url in enumerate(self.urls)]
            facts.extend(r.engine_facts(ReplicaFacts(index=i, endpoint=url))
                         for i, (url, r) in enumerate(zip(self.urls, replicas, strict=True)))
            found["host_differences"] = check_matched(facts, self.allowed)
            save()
            try:
                with futures.ThreadPoolExecutor(len(replicas), "abgate-endpoint") as ex:
                    Dispatch(state, ThreadPool(ex, replicas), ledger, on_loss=save).run(
                        list(range(len(replicas))))
            finally:
                found["dispatch_wall_s"] = round(ledger.wall_s, 6)
                for i, replica_facts in enumerate(facts):
                    replica_facts.busy_s = round(ledger.busy.get(i, 0.0), 6)
                save()

    def replica(self, stack: ExitStack, state: RunState, index: int, url: str,
                warm: list[Any]) -> Replica:
        prepared = {arm: on_endpoint(state.checked.prepared[arm].engine, url)
                    for arm in state.arms}
        r = Replica(index, prepared, warm)
        stack.callback(r.close)
        return r


def endpoint_strategy(urls: list[str], allowed: tuple[str, ...] = ()) -> EndpointFleet:
    return EndpointFleet(urls, allowed)
