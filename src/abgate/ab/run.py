"""Execute an A/B experiment: matched arms, a balanced schedule, per-arm records.

Layout of an A/B directory::

    ab.json                    experiment (as given, and resolved), schedule, status, engines
    arms/<arm>/run.json        the same records as ``abgate run`` (kind "ab-arm")
    arms/<arm>/samples.jsonl
    arms/<arm>/summary.json
    comparison.json            statistics and verdict (from saved samples only)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abgate.ab.checks import Checked, check_experiment
from abgate.ab.directory import AB_FILE, open_ab_dir
from abgate.ab.experiment import Experiment
from abgate.ab.revisions import Revisions
from abgate.ab.schedule import ArmSessions, ScheduleStrategy
from abgate.ab.state import OnPhase, Progress, RunState, new_state
from abgate.ab.strategies import LocalSessions, schedule_for
from abgate.records.sections import ArmDifferences
from abgate.records.side_documents import Summary
from abgate.runner.documents import source_state
from abgate.runner.execute import Status, end_record, fail_if_all_errors, tracked
from abgate.runner.outdir import claimed
from abgate.runner.provenance import ProvenanceOptions, input_hashes

__all__ = ["AbOutcome", "OnPhase", "Progress", "run_ab", "run_checked"]
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
    exp, prov, rules = checked.exp, checked.provenance, checked.policy
    # the policy's bytes too: a resumed (sequential) A/B decides under the same rules
    inputs = {**input_hashes(prov), "policy": rules.sha256}
    doc = open_ab_dir(exp, checked.prepared, out, checked.mode, resume, force,
                      source_state(out), inputs, prov.allow_source_change, rules.name)
    for arm, entry in checked.differences.items():
        found = doc.differences.setdefault(arm, ArmDifferences())
        found.declares, found.request = entry.declares, entry.request
    state = new_state(checked, out, doc, resume, progress, on_phase)
    if revisions is not None:  # (after the arms' directories are made)
        doc.source = revisions.record(out)
        sessions = sessions or revisions.sessions(state)
    state.save()
    summaries: dict[str, Summary | None] = {}

    def finish(status: Status) -> None:
        summaries.update(finish_state(state, status.value, status.error))

    with tracked(out, "A/B run", finish) as status:
        if on_start:
            on_start(state.n_done(), len(state.keys()) * len(exp.arms))
        (schedule or schedule_for(state)).run(state, sessions or LocalSessions(state))
        for arm, r in state.recorders.items():
            fail_if_all_errors(f"A/B arm {arm!r}", r.samples())
    return AbOutcome(out, status.value, summaries)
