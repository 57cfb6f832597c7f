"""``bench --cluster`` and ``baseline check --cluster`` on a real local Ray cluster
(``ray.cluster_utils.Cluster``: two nodes, each its own raylet, one CPU each): the same
bench (and the same baseline check) on every replica, llama.cpp replicas giving the same
greedy output on both nodes, and the slow node named (issue 33, item 7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from abgate.dirlock import LOCK_FILE
from abgate.records.cluster import ClusterBenchDocument, ClusterCheckDocument
from abgate.records.documents import BaselineRecord, BenchRecord
from abgate.runner.documents import read_document, read_record, source_state
from tests.conftest import thread_flags
from tests.support.fake import cli

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.engine, pytest.mark.extras]  # a real Ray cluster; llama.cpp replicas

SMALL = ["--input-len", "32", "--output-len", "8", "--warmup", "0", "--repeats", "2"]
TWO = ["--cluster", "auto", "--cluster-opt", "replicas=2", "--cluster-opt",
       'resources={"every": 1}']


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    # "every": a resource of the head and of the node each test adds (one per test):
    # two replicas of {"every": 1} land one on each
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                      "resources": {"every": 1}})
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def second_node(cluster: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    env = getattr(request, "param", None) or {}
    node = cluster.add_node(num_cpus=1, resources={"every": 1}, env_vars=env)
    cluster.wait_for_nodes()
    yield node
    cluster.remove_node(node)


def test_bench_runs_on_every_replica_with_one_writer(second_node: Any, tmp_path: Path) -> None:
    """llama.cpp on both nodes: each replica's whole bench (its own run.json, samples and
    summary) under replicas/<i>/, written by this process; the same greedy output on
    both; per-metric spread and the slowest replica in cluster.json; the table printed."""
    out = tmp_path / "cb"
    res = cli("bench", *SMALL, "--peak-bw", "10", *thread_flags(1), *TWO, "-o", str(out))
    assert res.returncode == 0, (res.stdout + res.stderr)
    doc = read_document(out / "cluster.json", ClusterBenchDocument)
    assert doc.status == "complete" and len(doc.replicas) == 2
    assert {r.facts.node_id for r in doc.replicas} == {
        second_node.node_id, ray.get_runtime_context().get_node_id()}
    for r in doc.replicas:
        run = read_record(out / str(r.dir) / "run.json", model=BenchRecord)
        assert run.status == "complete" and r.status == "complete"
        lines = (out / str(r.dir) / "samples.jsonl").read_text().splitlines()
        assert len(lines) == 2  # the 2 measured requests, appended on the replica
        assert not (out / str(r.dir) / LOCK_FILE).exists()
    [case] = doc.cases
    assert case.outputs_identical and len({r.output_sha256 for r in case.replicas}) == 1
    decode = next(s for s in case.spread if s.metric == "steady_decode_tps")
    assert decode.slowest in (0, 1) and decode.min is not None and decode.max is not None
    assert decode.min <= decode.median <= decode.max  # type: ignore[operator]
    assert "medians per replica" in res.stdout and "identical on every replica" in res.stdout
    # a second bench into the same directory: refused without --force, nothing lost
    again = cli("bench", *SMALL, "--peak-bw", "10", *thread_flags(1), *TWO, "-o", str(out))
    assert again.returncode == 2 and "not empty" in (again.stdout + again.stderr)
    assert read_document(out / "cluster.json", ClusterBenchDocument) == doc


@pytest.mark.parametrize("second_node", [{"ABGATE_FAKE_HOST_MS": "40"}], indirect=True)
def test_bench_names_the_slow_node(second_node: Any, tmp_path: Path) -> None:
    """A node whose engine answers 40 ms later (the fake engine's host overhead, on that
    node only): its replica is the slowest in TTFT, well above the replicas' median."""
    out = tmp_path / "slow"
    res = cli("bench", "--engine", "fake", *SMALL, "--peak-bw", "10", *TWO, "-o", str(out))
    assert res.returncode == 0, (res.stdout + res.stderr)
    doc = read_document(out / "cluster.json", ClusterBenchDocument)
    slow = next(r.index for r in doc.replicas if r.facts.node_id == second_node.node_id)
    ttft = next(s for s in doc.cases[0].spread if s.metric == "ttft_s")
    assert ttft.slowest == slow and ttft.slowest_vs_median is not None
    assert ttft.slowest_vs_median > 1.1 and ttft.spread is not None and ttft.spread > 0.2
    assert f"slowest replica {slow}" in (res.stdout + res.stderr)


def test_baseline_check_on_every_replica(second_node: Any, tmp_path: Path) -> None:
    """One baseline recorded with ``baseline record --cluster`` (on one replica actor,
    llama.cpp: the process kind the check runs in, so Ray's OMP_NUM_THREADS and a
    worker's mapped libraries are in the record), checked on both nodes with nothing
    declared: tokens and configuration match on each; with an engine arg the baseline
    did not record, each replica fails it, naming it."""
    base = tmp_path / "base"
    rec = cli("baseline", "record", *SMALL, "--no-probes", *thread_flags(1), *TWO,
              "-o", str(base))
    assert rec.returncode == 0, (rec.stdout + rec.stderr)
    assert "recorded on replica 0: node" in rec.stdout
    recorded = read_record(base / "baseline.json", model=BaselineRecord)
    assert recorded.provenance is not None and recorded.provenance.environment
    assert recorded.provenance.environment["env"].get("OMP_NUM_THREADS") == "1"  # Ray's
    assert recorded.git == source_state(base)  # this checkout's, not the replica's cwd
    report = tmp_path / "check.json"
    ok = cli("baseline", "check", str(base), "--tolerance", "1", *TWO, "--json", str(report))
    assert ok.returncode == 0, (ok.stdout + ok.stderr)
    doc = read_document(report, ClusterCheckDocument)
    assert doc.passed and len({r.facts.node_id for r in doc.replicas}) == 2
    for r in doc.replicas:
        assert r.passed and r.report is not None
        assert all(c["tokens_match"] for c in r.report["cases"])
    assert "PASS" in ok.stdout and "1/1 match" in ok.stdout
    bad = cli("baseline", "check", str(base), "--tolerance", "1", "--engine-arg", "n_ctx=768",
              *TWO, "--json", str(report))
    assert bad.returncode == 1, (bad.stdout + bad.stderr)
    doc = read_document(report, ClusterCheckDocument)
    assert not doc.passed and [r.passed for r in doc.replicas] == [False, False]
    assert all(r.report and "n_ctx" in r.report["configuration"]["summary"]
               for r in doc.replicas)
