"""From a directory (or an imported file) to a ledger :class:`Entry`; adding, re-adding
and checking.

A record's id is a digest of what cannot change after it started (kind, start time,
host, spec digest) for abgate's own records, and of the file's bytes for imports, so
re-adding the same directory is idempotent, a resumed run updates its row, and a
moved directory is recognised (its row gets the new path and ``moved_from``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.ab.decision import read_decisions
from abgate.errors import AbgateError, UsageError
from abgate.identity import json_sha256
from abgate.integrity import verify_file
from abgate.ledger.entries import (
    Entry,
    HumanVerdict,
    LedgerRecord,
    LedgerVerdicts,
    Unit,
    config_digest,
    distribution_metrics,
    sample_metrics,
    workload_digest,
)
from abgate.ledger.imports import read_import
from abgate.ledger.paths import disabled, ledger_path
from abgate.ledger.store import Ledger, opened
from abgate.records.bench_sections import CaseFigures
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import (
    AbRecord,
    AnyRecord,
    BaselineRecord,
    BenchRecord,
    RunRecord,
    SpecRecord,
)
from abgate.records.samples import Sample
from abgate.records.sections import GitState, ModelRef
from abgate.records.side_documents import BenchSummary
from abgate.runner import records as rec
from abgate.runner.documents import read_document, read_record
from abgate.runner.samples import load_samples

log = logging.getLogger("abgate.ledger")
RUN_WORKLOAD = ("suite", "selection", "item_ids", "seeds", "sampling", "prompt")
BENCH_WORKLOAD = ("output_len", "warmup", "repeats", "prompt_seed", "sampling")


def _header(doc: AnyRecord, path: Path, digest: str) -> Entry:
    git = doc.git or GitState()
    host = doc.host.hostname
    return Entry(
        id=json_sha256({"kind": doc.kind, "started_at": doc.started_at, "host": host,
                        "digest": digest}),
        kind=doc.kind, path=str(path.resolve()), status=doc.status,
        started_at=doc.started_at, ended_at=doc.ended_at,
        git_commit=git.commit, git_tree=git.tree, git_dirty=git.dirty,
        git_diff_sha256=git.diff_sha256, host=host, abgate_version=doc.abgate_version)


def _engine_facts(doc: SpecRecord) -> dict[str, Any]:
    spec, loaded = doc.spec, doc.engine
    model = spec.model or ModelRef()
    engine = loaded.name or spec.engine
    return {"engine": engine, "engine_version": loaded.version,
            "model": model.path, "model_sha256": model.sha256,
            "config_digest": config_digest(engine, loaded.effective, loaded.resolved)}


def run_unit(doc: RunRecord, samples: Sequence[Sample], name: str = "") -> Unit:
    """A run (or an A/B arm) as a unit: its engine facts, workload and sample metrics."""
    live = [s for s in samples if s.measured]
    return Unit(name=name, **_engine_facts(doc),
                suite=doc.spec.suite.name if doc.spec.suite else None,
                workload_digest=workload_digest(doc.spec.to_dict(), RUN_WORKLOAD), n=len(live),
                metrics=sample_metrics(live))


def _cases(doc: SpecRecord, cases: Sequence[CaseFigures]) -> list[Unit]:
    """One unit per bench case (a bench summary's or a baseline's)."""
    spec = doc.spec.to_dict()
    units = []
    for case in cases:
        units.append(Unit(name=f"in{case.input_len}/out{case.output_len}",
                          **_engine_facts(doc), suite="bench",
                          workload_digest=workload_digest(
                              {**spec, "input_len": case.input_len,
                               "prompt_sha256": case.prompt_sha256},
                              (*BENCH_WORKLOAD, "input_len", "prompt_sha256")),
                          n=case.n or 0, metrics=distribution_metrics(case.speed)))
    return units


def _run_dir(path: Path) -> Entry:
    doc = read_record(path / rec.RUN_FILE, "run", "ab-arm", "bench")
    if doc.kind == "ab-arm":
        raise UsageError(f"{path} is one arm of an A/B; add the A/B directory "
                         f"({path.parent.parent})")
    assert isinstance(doc, RunRecord | BenchRecord)
    entry = _header(doc, path, doc.spec_digest)
    if isinstance(doc, BenchRecord):
        entry.units = _cases(doc, read_document(path / rec.SUMMARY_FILE, BenchSummary).cases
                             if (path / rec.SUMMARY_FILE).exists() else [])
    else:
        entry.units = [run_unit(doc, load_samples(path / rec.SAMPLES_FILE))]
    return entry


def _ab_dir(path: Path) -> Entry:
    doc = read_record(path / "ab.json", "ab", model=AbRecord)
    entry = _header(doc, path, doc.digest)
    for arm in doc.experiment.arms:
        arm_dir = path / "arms" / arm
        if not (arm_dir / rec.RUN_FILE).exists():
            continue
        arm_doc = read_record(arm_dir / rec.RUN_FILE, "ab-arm", model=RunRecord)
        entry.units.append(run_unit(arm_doc, load_samples(arm_dir / rec.SAMPLES_FILE),
                                    name=arm))
    comparison_path = path / "comparison.json"
    if comparison_path.exists():
        comparison = read_document(comparison_path, ComparisonDoc)
        entry.decision = comparison.decision
        entry.verdicts = LedgerVerdicts(baseline=comparison.baseline, arms={
            arm: c.verdict.decision for arm, c in comparison.comparisons.items()})
    decisions = read_decisions(path)
    if decisions:  # the engineer's latest decision beside the machine's
        latest = decisions[-1]
        entry.verdicts.human = HumanVerdict(
            decision=latest.decision, relation=latest.relation,
            machine_verdict=latest.machine_verdict, arm=latest.arm, by=latest.by,
            decided_at=latest.decided_at, why=latest.why)
    return entry


def _baseline_dir(path: Path) -> Entry:
    verify_file(path / "baseline.json")  # the bytes on disk, before anything is read
    doc = read_record(path / "baseline.json", "baseline", model=BaselineRecord)
    entry = _header(doc, path, doc.spec_digest)
    entry.units = _cases(doc, doc.cases)
    return entry


def read_entry(path: Path) -> Entry:
    """The ledger entry of a run, A/B, bench or baseline directory, or of an imported
    lm-eval samples file or ``vllm bench serve`` result."""
    if path.is_file():
        return read_import(path)
    if not path.is_dir():
        raise UsageError(f"{path}: no such file or directory")
    if (path / "ab.json").exists():
        return _ab_dir(path)
    if (path / "baseline.json").exists():
        return _baseline_dir(path)
    if (path / rec.RUN_FILE).exists():
        return _run_dir(path)
    raise UsageError(f"{path}: not a run, A/B, bench or baseline directory (no run.json, "
                     "ab.json or baseline.json)")


@dataclass(frozen=True)
class Added:
    """What adding one path did: ``new``, ``updated``, ``unchanged``, ``moved`` or
    ``copy`` (the same record is already recorded at another path that still exists)."""

    action: str
    entry: Entry
    other_path: str | None = None


def add(ledger: Ledger, path: Path, entry: Entry | None = None) -> Added:
    """Index ``path`` (``entry``: it, read already by :func:`read_entry`)."""
    entry = read_entry(path) if entry is None else entry
    old = ledger.get(entry.id)
    if old is None:
        ledger.put(entry)
        return Added("new", entry)
    if old.path != entry.path:
        if Path(old.path).exists():
            return Added("copy", entry, old.path)
        ledger.put(entry, moved_from=old.path)
        return Added("moved", entry, old.path)
    same = all(getattr(old, k) == getattr(entry, k) for k in type(entry).model_fields
               if k != "units") and ledger.units_of(entry.id) == entry.units
    ledger.put(entry)
    return Added("unchanged" if same else "updated", entry)


@dataclass(frozen=True)
class CheckedEntry:
    record: LedgerRecord
    state: str  # ok | missing | changed (the path now holds another record) | unreadable
    detail: str = ""


def check(ledger: Ledger) -> list[CheckedEntry]:
    """Every record's path: still there and still the same record? Missing ones are
    marked (``missing_since``) and kept; they are never dropped silently."""
    out = []
    for record in ledger.records():
        path = Path(record.path)
        if not path.exists():
            ledger.mark_missing(record.id, True)
            out.append(CheckedEntry(record, "missing", "moved or deleted"))
            continue
        try:
            current = read_entry(path).id
        except AbgateError as exc:
            out.append(CheckedEntry(record, "unreadable", str(exc)))
            continue
        ledger.mark_missing(record.id, False)
        if current != record.id:
            out.append(CheckedEntry(record, "changed", f"now holds record {current[:12]}"))
        else:
            out.append(CheckedEntry(record, "ok"))
    return out


def index_quietly(path: Path, explicit: str | Path | None = None) -> Added | None:
    """Index a directory that a workflow just finished; any failure is logged as a
    warning and never fails the run. Does nothing when ``ABGATE_LEDGER=off``."""
    if explicit is None and disabled():
        return None
    try:
        with opened(ledger_path(explicit)) as ledger:
            return add(ledger, path)
    except Exception as exc:  # noqa: BLE001 - indexing must never fail a run
        log.warning("ledger: %s was not indexed: %s", path, exc)
        return None
