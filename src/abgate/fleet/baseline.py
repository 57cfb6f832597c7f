"""``abgate baseline check --cluster``: one baseline checked on every replica of a
cluster, at once.

The baseline is read and its seal verified here first (a damaged one is refused before
any replica starts); its files travel to each replica, which checks them from a
temporary directory of its own node with ``baseline.check_baseline`` — tokens of every
warm-up and repeat, speed against the recorded repeats, probes, and the configuration
against the recorded one — against its own engine and host. Passed only when every
replica passed; a replica lost or failed fails the check, named."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from abgate.baseline import check_baseline
from abgate.baseline.core import BASELINE_FILE, read_baseline
from abgate.errors import UsageError
from abgate.fleet.cluster import ClusterSpec
from abgate.fleet.every import ReplicaJob, on_every_replica
from abgate.fleet.matching import differences
from abgate.records.cluster import ClusterCheckDocument, ReplicaCheck


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
    files = {f.name: f.read_bytes() for f in sorted(base_dir.iterdir())
             if f.is_file() and not f.is_symlink()}
    jobs = on_every_replica(spec, check_here, (files, options))
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
