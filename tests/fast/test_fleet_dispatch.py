"""The fleet's dispatch loop (fleet/dispatch.py) over in-process replicas of the fake
engine, a thread each (the endpoint fleet's pool), for the faults a real cluster cannot
be made to show on demand: a replica that hangs past the item timeout is given up on,
its item runs again on the other one, every (item, seed, arm) is written once, in key
order, and the loss is recorded and named in the verdict."""

from __future__ import annotations

import json
from collections import Counter
from concurrent import futures
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from abgate.ab.experiment import load_experiment
from abgate.ab.schedule import ArmSessions
from abgate.ab.state import RunState
from abgate.ab.workflow import run_experiment
from abgate.fleet.dispatch import Dispatch, DispatchLog
from abgate.fleet.endpoints import ThreadPool
from abgate.fleet.replica import Replica
from abgate.records.fleet import FleetRecord
from abgate.runner.session import PreparedEngine
from tests.support.fake import experiment


def _hanging(p: PreparedEngine) -> PreparedEngine:
    args = {**p.resolved_args, "hang_at": 2, "hang_s": 2.0}
    return replace(p, spec=replace(p.spec, args=args), resolved_args=args)


class TwoThreads:
    """Replica 1 hangs (2 s) on its second request; the loop gives up on it after 0.8 s."""

    name = "two-threads"

    def __init__(self) -> None:
        self.ledger = DispatchLog()

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        prepared = {arm: state.checked.prepared[arm].engine for arm in state.arms}
        with ExitStack() as stack:
            replicas = [Replica(0, prepared, []),
                        Replica(1, {a: _hanging(p) for a, p in prepared.items()}, [])]
            for r in replicas:
                stack.callback(r.close)
            with futures.ThreadPoolExecutor(2) as ex:
                Dispatch(state, ThreadPool(ex, replicas), self.ledger, poll_s=0.2,
                         item_timeout_s=0.8).run([0, 1])
            state.doc.fleet = FleetRecord(replicas=[{}, {}], lost=self.ledger.lost,
                                          items_by_replica=self.ledger.items_by_replica)
            state.save()


def _keys(out: Path, arm: str) -> list[str]:
    lines = (out / "arms" / arm / "samples.jsonl").read_text().splitlines()
    return [s["key"] for s in map(json.loads, lines) if not s.get("warmup")]


def test_a_hung_replica_is_given_up_on_and_its_item_runs_once_elsewhere(
        tmp_path: Path) -> None:
    exp = load_experiment(experiment(tmp_path / "x.toml", "perturb = 0.05", limit=8,
                                     agreement=False, extra="probes = false\n"))
    one = run_experiment(exp, tmp_path / "one")
    schedule = TwoThreads()
    res = run_experiment(exp, tmp_path / "fleet", schedule=schedule)
    assert res.outcome.status == "complete"
    for arm in ("a", "b"):
        keys = _keys(tmp_path / "fleet", arm)
        assert keys == _keys(tmp_path / "one", arm)  # every key once, in key order
        assert set(Counter(keys).values()) == {1}
    (loss,) = schedule.ledger.lost
    assert loss.replica == 1 and "item timeout" in str(loss.error)
    by = schedule.ledger.items_by_replica
    assert len(by.get("1", [])) <= 1 and len(by["0"]) + len(by.get("1", [])) == 8
    notes = res.comparison.comparisons["b"].verdict.notes
    assert any("Replica 1 was lost" in n for n in notes)
    assert one.comparison.comparisons["b"].verdict.decision == \
        res.comparison.comparisons["b"].verdict.decision




def test_a_replicas_libraries_do_not_depend_on_which_same_named_copy_came_first() -> None:
    """Two files of one basename (e.g. two wheels' vendored copies) mapped by a replica's
    processes: the record names both hashes, whatever order the processes and maps give
    (keeping the first seen made alike replicas 'differ in libraries': seen with 4
    replicas on the 16-core machine)."""
    import pytest

    from abgate.fleet import replica
    from abgate.provenance import libmaps

    a = libmaps.MappedLib(path="/x/libgomp.so.1", sha256="a" * 64, size=1)
    b = libmaps.MappedLib(path="/y/libgomp.so.1", sha256="b" * 64, size=1)
    got = []
    for order in ([a, b], [b, a]):
        mp = pytest.MonkeyPatch()
        mp.setattr(libmaps, "snapshot_pids", lambda pids, o=order: [
            libmaps.WorkerMapping(pid=1, name="w", cmdline=(), libs=tuple(o))])
        got.append(replica.libraries([1]))
        mp.undo()
    assert got[0] == got[1] == {"libgomp.so.1": "a" * 64 + "," + "b" * 64}
