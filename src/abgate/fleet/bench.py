"""``abgate bench --cluster``: the same bench on every replica of a cluster, at once,
and which replica (GPU, node) is slow.

Each replica runs the whole bench (``bench.session.execute_bench``: load, plan, measure,
probes, its own ``run.json``, ``samples.jsonl`` and ``summary.json``) into a temporary
directory of its own node and returns the files; this process, the only writer of the
cluster's directory (its lock held), copies them byte for byte under ``replicas/<i>/``
and writes ``cluster.json``: each replica's host and outcome, each case's medians per
replica, their spread and the slowest replica per metric. Hosts that differ are
reported, not refused: finding the odd one is what this is for."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from abgate.bench.session import PreparedBench, execute_bench
from abgate.errors import AbgateError
from abgate.fleet.cluster import ClusterSpec
from abgate.fleet.every import ReplicaJob, landed, on_every_replica, shipped
from abgate.fleet.matching import differences
from abgate.records.cluster import (
    METRICS,
    ClusterBenchDocument,
    ClusterCase,
    MetricSpread,
    ReplicaFigures,
    ReplicaPart,
)
from abgate.records.side_documents import BenchSummary
from abgate.runner import records as rec
from abgate.runner.documents import read_document, write_record
from abgate.runner.outdir import claimed, prepare_new_dir
from abgate.runner.provenance import ProvenanceOptions

CLUSTER_FILE = "cluster.json"
REPLICAS_DIR = "replicas"


def bench_here(p: PreparedBench, provenance: ProvenanceOptions | None
               ) -> tuple[str, dict[str, bytes]]:
    """On a replica: the bench into a temporary directory (removed after), its status
    and files."""
    tmp = Path(tempfile.mkdtemp(prefix="abgate-cluster-bench-"))
    try:
        outcome = execute_bench(p, tmp / "bench", provenance=provenance)
        return outcome.status, shipped(tmp / "bench")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_on_cluster(p: PreparedBench, out: Path, spec: ClusterSpec, *, force: bool = False,
                     provenance: ProvenanceOptions | None = None) -> ClusterBenchDocument:
    """Run ``p`` on every replica of ``spec`` and write ``out``; an AbgateError when no
    replica completed (after ``cluster.json`` says why)."""
    with claimed(out, resume=False, force=force, marker=CLUSTER_FILE):
        jobs = on_every_replica(spec, bench_here, (p, provenance))
        prepare_new_dir(out, force, marker=CLUSTER_FILE)
        replicas = [_copied(out, job) for job in jobs]
        summaries = {r.index: read_document(out / str(r.dir) / rec.SUMMARY_FILE, BenchSummary)
                     for r in replicas if r.dir and (out / r.dir / rec.SUMMARY_FILE).is_file()}
        bad = [r for r in replicas if r.status != "complete"]
        doc = ClusterBenchDocument.new(
            status="failed" if bad else "complete",
            error="; ".join(f"replica {r.index}: {r.status}: {r.error or '-'}" for r in bad)
            or None,
            cluster=spec.record(), replicas=replicas,
            host_differences=differences([j.facts for j in jobs if j.error is None]),
            cases=cases(summaries))
        write_record(out / CLUSTER_FILE, doc)
    if len(bad) == len(replicas):
        raise AbgateError(f"{out / CLUSTER_FILE}: no replica completed: {doc.error}")
    return doc


def _copied(out: Path, job: ReplicaJob) -> ReplicaPart:
    """A replica's bench files written under ``replicas/<i>/`` (fsynced, atomically)."""
    if job.error is not None or job.value is None:
        return ReplicaPart(index=job.index, facts=job.facts, status="lost", error=job.error)
    status, files = job.value
    where = f"{REPLICAS_DIR}/{job.index}"
    landed(out / where, files)
    return ReplicaPart(index=job.index, facts=job.facts, status=status, dir=where)


def cases(summaries: dict[int, BenchSummary]) -> list[ClusterCase]:
    """Per case (in the bench's order): each replica's medians, their spread."""
    if not summaries:
        return []
    first = next(iter(summaries.values()))
    out = []
    for k, case in enumerate(first.cases):
        rows = [ReplicaFigures(replica=i, output_sha256=s.cases[k].output_sha256,
                               medians={m: s.cases[k].speed.of(m).median for m, _ in METRICS})
                for i, s in summaries.items() if k < len(s.cases)]
        out.append(ClusterCase(
            input_len=case.input_len, output_len=case.output_len, replicas=rows,
            spread=[spread(m, better, rows) for m, better in METRICS],
            outputs_identical=len({r.output_sha256 for r in rows}) == 1))
    return out


def spread(metric: str, better: str, rows: list[ReplicaFigures]) -> MetricSpread:
    values = {r.replica: r.medians.get(metric) for r in rows}
    known = {i: v for i, v in values.items() if v is not None}
    if not known:
        return MetricSpread(metric=metric, better=better)  # type: ignore[arg-type]
    lo, hi, mid = min(known.values()), max(known.values()), statistics.median(known.values())
    slowest = (min if better == "higher" else max)(known, key=lambda i: known[i])
    return MetricSpread(metric=metric, better=better, median=mid, min=lo,  # type: ignore[arg-type]
                        max=hi, spread=hi / lo - 1.0 if lo > 0 else None, slowest=slowest,
                        slowest_vs_median=known[slowest] / mid if mid else None)
