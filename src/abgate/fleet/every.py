"""One job on every replica of a cluster, at once: ``bench --cluster`` and ``baseline
check --cluster`` (``fleet.bench``, ``fleet.baseline``).

Each replica is a Ray actor in its own placement-group bundle (``[cluster]``'s CPUs,
GPUs, resources and placement, as the A/B's replicas). It runs the job — a plain
function of abgate's, loading its own engine — and returns the job's value; nothing is
written on the replica's node but the job's own temporary directory. A replica whose
actor or node dies, or whose job fails, is recorded with the error; the others still
report. Every actor is killed and the placement group removed on every way out."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate import safefs
from abgate.dirlock import LOCK_FILE
from abgate.fleet.cluster import ClusterSpec, connected, in_bundle, placed, removed
from abgate.fleet.replica import host_facts
from abgate.records.fleet import ReplicaFacts

_NOT_SHIPPED = {LOCK_FILE, ".abgate-write-test"}  # a directory's lock and write probe


def shipped(directory: Path) -> dict[str, bytes]:
    """On a replica: the files a job wrote in ``directory`` (its own lock left out), to
    travel back to the coordinator."""
    return {f.name: f.read_bytes() for f in sorted(directory.iterdir())
            if f.is_file() and not f.is_symlink() and f.name not in _NOT_SHIPPED}


def landed(directory: Path, files: dict[str, bytes]) -> None:
    """Here, the only writer of ``directory``: a replica's files written byte for byte,
    each fsynced and atomically, never through a link."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        safefs.write_atomic(directory / name, data)


@dataclass(frozen=True)
class ReplicaJob:
    """One replica's part: where it ran, and the job's value or why there is none."""

    index: int
    facts: ReplicaFacts  # fleet.replica.host_facts; the index alone when the actor never answered
    value: Any = None
    error: str | None = None


class Worker:
    """Wrapped by ``ray.remote`` below: one per bundle."""

    def __init__(self, index: int) -> None:
        self.index = index

    def facts(self) -> ReplicaFacts:
        return host_facts(self.index)

    def run(self, job: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        return job(*args)


def on_every_replica(spec: ClusterSpec, job: Callable[..., Any], args: tuple[Any, ...],
                     timeout_s: float | None = None) -> list[ReplicaJob]:
    """``job(*args)`` on each of ``spec.replicas`` replicas, concurrently."""
    with connected(spec) as ray:
        pg = placed(ray, spec)
        actor = ray.remote(max_restarts=0, max_task_retries=0)(Worker)
        workers = [actor.options(**in_bundle(spec, pg, i)).remote(i)
                   for i in range(spec.replicas)]
        try:
            facts = [_get(ray, w.facts.remote(), 300) for w in workers]
            runs = [w.run.remote(job, args) for w in workers]
            return [_job(ray, i, fact, ref, timeout_s)
                    for i, (fact, ref) in enumerate(zip(facts, runs, strict=True))]
        finally:
            for w in workers:
                with contextlib.suppress(Exception):
                    ray.kill(w)
            removed(pg)


def _get(ray: Any, ref: Any, timeout_s: float | None) -> Any:
    try:
        return ray.get(ref, timeout=timeout_s), None
    except Exception as exc:  # the job's own error (RayTaskError), a lost actor or node
        cause = getattr(exc, "cause", None) or exc
        return None, f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1][:300]}"


def _job(ray: Any, index: int, fact: tuple[Any, str | None], ref: Any,
         timeout_s: float | None) -> ReplicaJob:
    facts, lost = fact
    if lost is not None:
        return ReplicaJob(index, ReplicaFacts(index=index), None, lost)
    value, error = _get(ray, ref, timeout_s)
    return ReplicaJob(index, facts, value, error)
