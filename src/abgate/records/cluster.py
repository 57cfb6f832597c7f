"""The documents of a bench and a baseline check run on every replica of a cluster
(``abgate bench --cluster``: ``cluster.json``; ``abgate baseline check --cluster
--json``), typed: written by :mod:`abgate.fleet.bench` and :mod:`abgate.fleet.baseline`,
read back by the same models."""

from __future__ import annotations

from typing import Any, Literal

from abgate.records.bench_sections import Part
from abgate.records.documents import Document, Status
from abgate.records.fleet import ClusterRecord, ReplicaFacts

# A bench's speed figures compared across replicas, and which way is better.
METRICS: tuple[tuple[str, Literal["higher", "lower"]], ...] = (
    ("prefill_tps", "higher"), ("ttft_s", "lower"), ("steady_decode_tps", "higher"),
    ("tpot_ms", "lower"), ("e2e_s", "lower"), ("output_tps", "higher"))


class ReplicaPart(Part):
    """One replica: where it ran (``fleet.replica.host_facts``), and its outcome."""

    index: int
    facts: ReplicaFacts
    status: str  # the replica's own run status; "lost" when none came back
    error: str | None = None
    dir: str | None = None  # its run, copied under the cluster's directory


class ReplicaFigures(Part):
    """One replica's medians of one case, and its greedy output."""

    replica: int
    medians: dict[str, float | None]
    output_sha256: str | None = None


class MetricSpread(Part):
    """One metric over the replicas' medians: the range, the spread (max / min - 1) and
    the slowest replica, with how far it is from the replicas' median."""

    metric: str
    better: Literal["higher", "lower"]
    median: float | None = None
    min: float | None = None
    max: float | None = None
    spread: float | None = None
    slowest: int | None = None
    slowest_vs_median: float | None = None  # its median / the replicas' median


class ClusterCase(Part):
    input_len: int
    output_len: int
    replicas: list[ReplicaFigures]
    spread: list[MetricSpread]
    outputs_identical: bool  # every replica's greedy output the same


class ClusterBenchDocument(Document):
    """``cluster.json`` of ``abgate bench --cluster``: the same bench on every replica,
    each replica's run under ``replicas/<i>/``."""

    NAME = "cluster-bench"
    kind: Literal["cluster-bench"] = "cluster-bench"
    status: Status
    error: str | None = None
    cluster: ClusterRecord
    concurrent: bool = True  # the replicas ran at once
    replicas: list[ReplicaPart]
    host_differences: list[str]  # fleet.matching.MATCHED keys that differ: reported
    cases: list[ClusterCase]


class ReplicaCheck(ReplicaPart):
    passed: bool
    report: dict[str, Any] | None = None  # the replica's ``baseline check --json``


class ClusterCheckDocument(Document):
    """``abgate baseline check --cluster --json``: one baseline checked on every replica;
    passed only when every replica passed."""

    NAME = "cluster-check"
    kind: Literal["cluster-check"] = "cluster-check"
    baseline: str
    passed: bool
    cluster: ClusterRecord
    replicas: list[ReplicaCheck]
    host_differences: list[str]
