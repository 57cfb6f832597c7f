"""(c) of issue 33: a SIGKILLed ``abgate ab --cluster local:2`` leaves no process behind,
and (item 4) ``--resume`` of that A/B, whose cluster is gone, completes on a new one; a
SIGKILLed ``abgate bench --cluster local:2`` leaves none either.

In a module of its own: next to tests/test_fleet.py's module-scoped 2-node cluster (alive
while that module runs) the replicas of this test's own local cluster never started within
180 s in a full engine-tier run (it passes alone in 14 s); a module of its own runs when no
other cluster of this process is up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.fake import experiment

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.engine, pytest.mark.extras]  # a real local Ray cluster started by abgate


def test_a_sigkilled_coordinator_leaves_no_process(tmp_path: Path) -> None:
    """(c) ``abgate ab --cluster local:2`` killed with SIGKILL while a replica hangs:
    its actors, its engines and the local cluster abgate started are all gone."""
    path = experiment(tmp_path / "k.toml", "perturb = 0.05, hang_at = 3, hang_s = 8",
                      limit=8, agreement=False,
                      extra="probes = false\n\n[cluster]\nreplicas = 2\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "ab", str(path), "--cluster",
                             "local:2", "-o", str(tmp_path / "out")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        actors = _wait_for_replicas(tmp_path / "out" / "ab.json")
        kids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert set(actors) <= set(kids)  # the replicas run in the coordinator's cluster
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(kids):
        time.sleep(0.5)
    assert _alive(kids) == []
    # item 4: --resume of the A/B whose cluster is gone continues on a new one
    r = subprocess.run([sys.executable, "-m", "abgate", "ab", str(path), "--resume",
                        str(tmp_path / "out"), "--cluster", "local:2"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1, 3), r.stderr
    ab = json.loads((tmp_path / "out" / "ab.json").read_text())
    assert ab["status"] == "complete" and ab["resumes"]
    for arm in ("a", "b"):
        lines = (tmp_path / "out" / "arms" / arm / "samples.jsonl").read_text().splitlines()
        keys = [json.loads(x)["key"] for x in lines if x.strip()]
        assert sorted(keys) == sorted(set(keys)) and len(keys) == 8
    assert {r["node_id"] for r in ab["fleet"]["replicas"]}  # the new cluster's replicas


def _wait_for_replicas(ab_json: Path) -> list[int]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            fleet = json.loads(ab_json.read_text()).get("fleet") or {}
        except (OSError, ValueError):
            fleet = {}
        if fleet.get("replicas"):
            return [int(r["pid"]) for r in fleet["replicas"]]
        time.sleep(0.5)
    raise AssertionError("the replicas never started")


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def test_a_sigkilled_bench_coordinator_leaves_no_process(tmp_path: Path) -> None:
    """``abgate bench --cluster local:2`` killed with SIGKILL while both replicas' engines
    hang in a request: the workers, their engines and the local cluster are all gone,
    and nothing of the bench reached ``-o`` (the replicas write on their nodes)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = tmp_path / "bench"
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "bench", "--engine", "fake",
                             "--engine-arg", "hang_at=1", "--engine-arg", "hang_s=30",
                             "--input-len", "32", "--output-len", "8", "--warmup", "0",
                             "--repeats", "2", "--peak-bw", "10", "--cluster", "local:2",
                             "-o", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers = _wait_for_workers(proc.pid, 2)
        kids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert set(workers) <= set(kids)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(kids):
        time.sleep(0.5)
    assert _alive(kids) == []
    assert not (out / "cluster.json").exists()


def _wait_for_workers(root: int, n: int) -> list[int]:
    """The pids of ``n`` replica workers (Ray titles an actor's process ``ray::Worker``)
    once each runs its job, under ``root``."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        found = []
        for c in psutil.Process(root).children(recursive=True):
            try:
                if "ray::Worker.run" in " ".join(c.cmdline()):
                    found.append(c.pid)
            except psutil.Error:
                continue
        if len(found) >= n:
            return found
        time.sleep(0.5)
    raise AssertionError("the replica workers never started their bench")
