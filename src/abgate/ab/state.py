"""The typed run state of one A/B: what every phase and schedule reads and writes, and
the A/B directory's ``ab.json`` it is opened from (:func:`open_state`).

A :class:`RunState` is data, not a runner: the arms, the keys to run and those done,
the per-arm record writers, the policy and the sequential look hook. The phases
(``ab.phases``) and the schedules (``ab.schedule``) are functions and strategies over
it; only the coordinator process that holds it writes the A/B directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate.ab.checks import Checked
from abgate.ab.experiment import Experiment
from abgate.compare import Policy
from abgate.errors import UsageError
from abgate.identity import json_sha256
from abgate.progress import Step
from abgate.records import documents as docs
from abgate.records.samples import Sample, sample_key
from abgate.records.sections import ArmDifferences, GitState
from abgate.runner import records as rec
from abgate.runner.documents import new_record, read_record, source_state, write_record
from abgate.runner.execute import RunRecorder
from abgate.runner.outdir import prepare_new_dir
from abgate.runner.provenance import input_hashes
from abgate.runner.resume import resumed
from abgate.runner.samples import load_samples
from abgate.suites import Item

Progress = Callable[[Sample | Step], None]  # a sample, or a scoring step
OnPhase = Callable[[int, int, str], None]  # (done, total, phase): a later phase begins
Key = tuple[Item, int]  # (item, seed)
AB_FILE = "ab.json"


@dataclass
class RunState:
    checked: Checked
    out: Path
    doc: docs.AbRecord
    recorders: dict[str, RunRecorder]  # arm -> its record writer
    progress: Progress | None = None
    on_phase: OnPhase | None = None
    previous: str | None = None  # the status a resume continues from
    session: int = 0  # how many resumes came before this session
    prompt_sha: dict[str, str] = field(default_factory=dict)  # key -> first sha seen
    weights: dict[str, Any] = field(default_factory=dict)  # [evidence] weights: arm -> held

    @property
    def exp(self) -> Experiment:
        return self.checked.exp

    @property
    def policy(self) -> Policy:
        return self.checked.policy

    @property
    def arms(self) -> list[str]:
        return list(self.exp.arms)

    def keys(self) -> list[Key]:
        """Every (item, seed) of the experiment, in the baseline arm's order."""
        return self.checked.prepared[self.exp.baseline].keys()

    def is_done(self, arm: str, item: Item, seed: int) -> bool:
        return sample_key(item.id, seed) in self.recorders[arm].done

    def todo(self, arm: str) -> list[Key]:
        return [(i, s) for i, s in self.keys() if not self.is_done(arm, i, s)]

    def n_done(self) -> int:
        return sum(1 for r in self.recorders.values() for k in r.done
                   if not k.startswith("warmup"))

    def arm_dir(self, arm: str) -> Path:
        return self.out / "arms" / arm

    def save(self) -> None:
        write_record(self.out / AB_FILE, self.doc)


def open_state(checked: Checked, out: Path, *, resume: bool, force: bool,
               progress: Progress | None = None, on_phase: OnPhase | None = None
               ) -> RunState:
    """The state of a fresh or resumed A/B in ``out``, whose claim
    (``runner.outdir.claimed``) the caller holds: its ``ab.json`` (:func:`open_ab_dir`)
    and a record writer per arm; an arm without ``run.json`` yet (killed right after
    ``ab.json``) starts afresh."""
    doc = open_ab_dir(checked, out, resume, force)
    git = doc.git_for_arms()  # one for all arms
    allow = checked.provenance.allow_source_change
    recorders = {name: RunRecorder(p, out / "arms" / name, force=False, git=git,
                                   allow_source_change=allow,
                                   resume=resume and (out / "arms" / name /
                                                      rec.RUN_FILE).is_file(),
                                   kind="ab-arm")
                 for name, p in checked.prepared.items()}
    previous = doc.resumes[-1].from_status if resume and doc.resumes else None
    state = RunState(checked, out, doc, recorders, progress, on_phase, previous,
                     len(doc.resumes))
    for r in recorders.values():
        for s in load_samples(r.samples_path):
            if s.measured and s.key and s.prompt.sha256:
                state.prompt_sha.setdefault(s.key, s.prompt.sha256)
    return state


def open_ab_dir(checked: Checked, out: Path, resume: bool, force: bool) -> docs.AbRecord:
    """``out/ab.json`` as recorded (``resume``: the experiment, source and inputs must
    be those recorded) or written anew (the directory cleared first with ``force``),
    this start's source state and inputs (contract, manifest, policy) recorded, and the
    differences the checks found before the load (saved with the state)."""
    prov, rules = checked.provenance, checked.policy
    # the policy's bytes too: a resumed (sequential) A/B decides under the same rules
    inputs = {**input_hashes(prov), "policy": rules.sha256}
    git = source_state(out)
    specs = {name: p.spec_digest for name, p in checked.prepared.items()}
    given = checked.exp.to_dict()  # as given: recorded, and what its digest covers
    digest = json_sha256({"experiment": given, "specs": specs, "mode": checked.mode})
    if resume:
        doc = read_record(out / AB_FILE, "ab", model=docs.AbRecord)
        if doc.digest != digest:
            raise UsageError(f"--resume {out}: the experiment differs from the recorded one; "
                             "use a new directory")
        resumed(doc, out, git, inputs, prov.allow_source_change)
    else:
        prepare_new_dir(out, force, marker=AB_FILE)
        doc = _new_ab_json(checked, git, inputs, given, specs, digest)
        write_record(out / AB_FILE, doc)  # before arms/: a --force later finds it abgate's
    for arm, entry in checked.differences.items():
        found = doc.differences.setdefault(arm, ArmDifferences())
        found.declares, found.request = entry.declares, entry.request
    return doc


def _new_ab_json(checked: Checked, git: GitState | None, inputs: dict[str, str | None],
                 given: dict[str, Any], specs: dict[str, str], digest: str) -> docs.AbRecord:
    exp = checked.exp
    made = new_record("ab", git=git, inputs=inputs, experiment=given,
                      experiment_resolved=exp.resolved(checked.policy.name),
                      arm_spec_digests=specs, digest=digest,
                      schedule={"mode": checked.mode, "warmup": exp.schedule.warmup,
                                "block_size": exp.schedule.block_size, "executed": []},
                      engines={}, resumes=[], differences={})
    assert isinstance(made, docs.AbRecord)
    return made
