"""The A/B workflow as one library call: run the arms, analyse, diff weights, report.

``abgate ab`` is a thin wrapper over :func:`run_experiment`; anything that wants an A/B
with its verdict and reports (a script, a CI job, a notebook) calls the same function.
:func:`run_ab` runs the arms only (matched arms, a balanced schedule, per-arm records).

Layout of an A/B directory::

    ab.json                    experiment (as given, and resolved), schedule, status, engines
    arms/<arm>/run.json        the same records as ``abgate run`` (kind "ab-arm")
    arms/<arm>/samples.jsonl
    arms/<arm>/summary.json
    comparison.json            statistics and verdict (from saved samples only)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from abgate import signals
from abgate.ab.analyze import COMPARISON_FILE, analyze
from abgate.ab.checks import Checked, check_experiment
from abgate.ab.experiment import Experiment
from abgate.ab.revisions import Revisions
from abgate.ab.schedule import ArmSessions, ScheduleStrategy
from abgate.ab.state import AB_FILE, OnPhase, Progress, RunState, open_state
from abgate.ab.strategies import LocalSessions, schedule_for
from abgate.errors import AbgateError
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import AbRecord
from abgate.records.side_documents import Summary
from abgate.runner import records as rec
from abgate.runner.documents import read_document, read_record
from abgate.runner.execute import Status, end_record, fail_if_all_errors, tracked
from abgate.runner.outdir import claimed
from abgate.runner.provenance import ProvenanceOptions
from abgate.runner.spec import PreparedRun

__all__ = ["AbOutcome", "AbResult", "OnPhase", "Progress", "recorded_result", "run_ab",
           "run_checked", "run_experiment"]
log = logging.getLogger("abgate.ab")


@dataclass(frozen=True)
class AbOutcome:
    out: Path
    status: str
    arms: dict[str, Summary | None]  # arm -> its summary (None: none readable)


def finish_state(state: RunState, status: str, error: str | None
                 ) -> dict[str, Summary | None]:
    """Every arm's records and ``ab.json`` finalised with ``status``."""
    summaries: dict[str, Summary | None] = {arm: r.finish(status, error)
                                            for arm, r in state.recorders.items()}
    end_record(state.doc, state.out, state.previous, status, error, log)
    state.save()
    return summaries


def run_ab(exp: Experiment, out: Path, *, resume: bool = False, force: bool = False,
           on_start: Callable[[int, int], None] | None = None,
           progress: Progress | None = None,
           provenance: ProvenanceOptions | None = None,
           on_phase: OnPhase | None = None, policy: str | None = None) -> AbOutcome:
    """Run ``exp``'s arms into ``out`` (or finish them with ``resume``). Bad input
    raises UsageError before anything is written (``ab.checks``)."""
    checked = check_experiment(exp, provenance, policy)
    with claimed(out, resume=resume, force=force, marker=AB_FILE):
        return run_checked(checked, out, resume=resume, force=force, on_start=on_start,
                           progress=progress, on_phase=on_phase)


def run_checked(checked: Checked, out: Path, *, resume: bool, force: bool,
                on_start: Callable[[int, int], None] | None = None,
                progress: Progress | None = None,
                on_phase: OnPhase | None = None, schedule: ScheduleStrategy | None = None,
                sessions: ArmSessions | None = None,
                revisions: Revisions | None = None) -> AbOutcome:
    """Run an experiment that passed :func:`~abgate.ab.checks.check_experiment` into
    ``out``, whose claim (``runner.outdir.claimed``) the caller holds. ``schedule``
    (default: :func:`~abgate.ab.strategies.schedule_for`) runs the samples, loading arms
    through ``sessions`` (default: in this process)."""
    state = open_state(checked, out, resume=resume, force=force, progress=progress,
                       on_phase=on_phase)
    if revisions is not None:  # (after the arms' directories are made)
        state.doc.source = revisions.record(out)
        sessions = sessions or revisions.sessions(state)
    state.save()
    summaries: dict[str, Summary | None] = {}

    def finish(status: Status) -> None:
        summaries.update(finish_state(state, status.value, status.error))

    with tracked(out, "A/B run", finish) as status:
        if on_start:
            on_start(state.n_done(), len(state.keys()) * len(state.arms))
        (schedule or schedule_for(state)).run(state, sessions or LocalSessions(state))
        for arm, r in state.recorders.items():
            fail_if_all_errors(f"A/B arm {arm!r}", r.samples())
    return AbOutcome(out, status.value, summaries)


@dataclass(frozen=True)
class AbResult:
    """How the arms ran, the comparison (``comparison.json``) and the report files."""

    outcome: AbOutcome
    comparison: ComparisonDoc
    reports: list[Path]

    @property
    def exit_code(self) -> int:
        """130 when interrupted, else the verdict's (0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE)."""
        if self.outcome.status == "interrupted":
            return 130
        return int(self.comparison.exit_code or 0)


def diff_weights(exp: Experiment, prepared: Mapping[str, PreparedRun], out: Path
                 ) -> list[Path]:
    """``weights-diff-<arm>.json`` for each candidate whose model differs from the
    baseline's (needs ``abgate[weights]``; ``prepared``: the arms as the A/B's checks
    prepared them); the report shows them."""
    from abgate.weights import diff_arm_checkpoints

    models = {arm: Path(prepared[arm].engine.model) for arm in exp.candidates}
    return diff_arm_checkpoints(Path(prepared[exp.baseline].engine.model), models, out)


def run_experiment(exp: Experiment, out: Path, *, resume: bool = False, force: bool = False,
                   on_start: Callable[[int, int], None] | None = None,
                   progress: Progress | None = None,
                   provenance: ProvenanceOptions | None = None,
                   weights_diff: bool = False, policy: str | None = None,
                   on_phase: OnPhase | None = None,
                   schedule: ScheduleStrategy | None = None,
                   revisions: Revisions | None = None) -> AbResult:
    """Run ``exp`` into ``out`` (or finish it with ``resume``) and write its verdict and
    reports. Bad input raises UsageError before anything is written. ``revisions``: a
    revision A/B's builds (``ab.revisions.build_arms``; ``exp`` is then its
    ``revisions.exp``)."""
    checked = check_experiment(exp, provenance, policy)  # bad input: before any work
    from abgate.report import write_reports

    with claimed(out, resume=resume, force=force, marker=AB_FILE):  # held until the reports
        outcome = run_checked(checked, out, resume=resume, force=force, on_start=on_start,
                              progress=progress, on_phase=on_phase, schedule=schedule,
                              revisions=revisions)
        with signals.deferred():  # a signal now: noted; the verdict and reports first
            comparison = analyze(out, policy)
            if weights_diff:
                diff_weights(exp, checked.prepared, out)
            return AbResult(outcome, comparison, write_reports(out))


def _summaries(out: Path, arms: list[str]) -> dict[str, Summary | None]:
    summaries: dict[str, Summary | None] = {}
    for arm in arms:
        try:
            summaries[arm] = read_document(out / "arms" / arm / rec.SUMMARY_FILE, Summary)
        except AbgateError:
            summaries[arm] = None
    return summaries


def recorded_result(out: Path, *, reanalyse: bool = False,
                    policy: str | None = None) -> AbResult:
    """An A/B that is not run again: its verdict as recorded (``comparison.json``), or,
    with ``reanalyse`` (or when there is none yet), its saved samples analysed afresh
    (under ``policy``, default the recorded one) and the reports rewritten. No engine
    is loaded and no sample, score or probe is redone."""
    from abgate.report import FILES, write_reports

    doc = read_record(out / AB_FILE, "ab", model=AbRecord)
    outcome = AbOutcome(out, str(doc.status), _summaries(out, list(doc.experiment.arms)))
    comparison: ComparisonDoc | None = None
    if not reanalyse and policy is None:
        try:
            comparison = read_document(out / COMPARISON_FILE, ComparisonDoc)
        except AbgateError:
            comparison = None  # none yet (killed before the analysis), or unreadable
    if comparison is None or comparison.exit_code is None:
        return AbResult(outcome, analyze(out, policy), write_reports(out))
    return AbResult(outcome, comparison,
                    [out / name for name in FILES.values() if (out / name).exists()])
