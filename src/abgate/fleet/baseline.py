"""``abgate baseline check --cluster``: one baseline checked on every replica of a
cluster, at once; ``abgate baseline record --cluster``: one recorded on a replica, so
that the replicas checked against it run in the process kind it was recorded in.

The baseline is read and its seal verified here first (a damaged one is refused before
any replica starts); its files travel to each replica, which checks them from a
temporary directory of its own node with ``baseline.check_baseline`` — tokens of every
warm-up and repeat, speed against the recorded repeats, probes, and the configuration
against the recorded one — against its own engine and host. Passed only when every
replica passed; a replica lost or failed fails the check, named."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from abgate.baseline import check_baseline, record_baseline
from abgate.baseline.core import BASELINE_FILE, read_baseline
from abgate.bench import BenchConfig, prepare_bench
from abgate.errors import AbgateError, UsageError
from abgate.fleet.cluster import ClusterSpec
from abgate.fleet.every import ReplicaJob, landed, on_every_replica, shipped
from abgate.fleet.matching import differences
from abgate.records.cluster import ClusterCheckDocument, ReplicaCheck
from abgate.records.documents import BaselineRecord
from abgate.records.fleet import ReplicaFacts
from abgate.records.sections import GitState
from abgate.runner.documents import source_state
from abgate.runner.outdir import claimed, prepare_new_dir
from abgate.runner.provenance import ProvenanceOptions


def check_here(files: dict[str, bytes], options: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """On a replica: the baseline's files into a temporary directory (removed after),
    checked there; whether it passed and the check's report."""
    tmp = Path(tempfile.mkdtemp(prefix="abgate-cluster-check-"))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        report = check_baseline(tmp, **options)
        return report.passed, report.document().to_dict()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_on_cluster(base_dir: Path, spec: ClusterSpec, **options: Any) -> ClusterCheckDocument:
    """``options``: :func:`abgate.baseline.check_baseline`'s keywords (engine args,
    tolerance, repeats, allowed differences, provenance; no progress: replicas report
    at the end)."""
    path = base_dir / BASELINE_FILE
    if not path.is_file():
        raise UsageError(f"{base_dir}: no {BASELINE_FILE}; record one with "
                         "'abgate baseline record'")
    read_baseline(path)  # the seal and what a check relies on, before any replica starts
    jobs = on_every_replica(spec, check_here, (shipped(base_dir), options))
    replicas = [_replica(job) for job in jobs]
    return ClusterCheckDocument.new(
        baseline=str(base_dir), passed=all(r.passed for r in replicas),
        cluster=spec.record(), replicas=replicas,
        host_differences=differences([j.facts for j in jobs if j.error is None]))


def _replica(job: ReplicaJob) -> ReplicaCheck:
    if job.error is not None or job.value is None:
        return ReplicaCheck(index=job.index, facts=job.facts, status="lost", error=job.error,
                            passed=False)
    passed, report = job.value
    return ReplicaCheck(index=job.index, facts=job.facts, status="complete", passed=passed,
                        report=report)


def record_here(config: BenchConfig, provenance: ProvenanceOptions | None,
                git: GitState | None) -> tuple[str | None, dict[str, bytes]]:
    """On a replica: the baseline recorded into a temporary directory (removed after);
    why it is no reference (None when it is one) and its files."""
    tmp = Path(tempfile.mkdtemp(prefix="abgate-cluster-record-"))
    try:
        error = None
        try:
            record_baseline(config, tmp / "base", provenance=provenance, git=git)
        except AbgateError as exc:  # written ``failed``: its files still come back
            if not (tmp / "base" / BASELINE_FILE).is_file():
                raise
            error = str(exc)
        return error, shipped(tmp / "base")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record_on_cluster(config: BenchConfig, out: Path, spec: ClusterSpec, *,
                      force: bool = False, provenance: ProvenanceOptions | None = None
                      ) -> tuple[BaselineRecord, ReplicaFacts]:
    """``baseline record --cluster``: the baseline recorded on one replica of ``spec``
    (its first bundle's resources), in the process kind that ``baseline check
    --cluster`` checks in — a replica actor, whose environment an engine may change
    (vLLM sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` in a Ray actor) and whose mapped
    libraries are a worker's — so that a replica like it matches with nothing declared.
    The files come back here, the only writer of ``out`` (its lock held), byte for
    byte; the seal is the replica's. The git state is this checkout's."""
    prepare_bench(config)  # bad input refused here, before any replica starts
    with claimed(out, resume=False, force=force, marker=BASELINE_FILE):
        git = source_state(out)
        job = on_every_replica(replace(spec, replicas=1), record_here,
                               (config, provenance, git))[0]
        if job.error is not None or job.value is None:
            raise AbgateError(f"baseline record --cluster: no baseline from replica 0 "
                              f"(lost, or its job failed): {job.error}")
        error, files = job.value
        prepare_new_dir(out, force, marker=BASELINE_FILE)
        landed(out, files)
    if error is not None:  # the replica's message names its temporary directory
        raise AbgateError(f"{out / BASELINE_FILE}: {error.split(': ', 1)[-1]}")
    return read_baseline(out / BASELINE_FILE)[0], job.facts
