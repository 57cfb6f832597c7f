"""The typed run state of one A/B: what every phase and schedule reads and writes.

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
from abgate.ab.directory import AB_FILE
from abgate.ab.experiment import Experiment
from abgate.compare import Policy
from abgate.progress import Step
from abgate.records import documents as docs
from abgate.records.samples import Sample, sample_key
from abgate.runner import records as rec
from abgate.runner.documents import write_record
from abgate.runner.execute import RunRecorder
from abgate.runner.samples import load_samples
from abgate.suites import Item

Progress = Callable[[Sample | Step], None]  # a sample, or a scoring step
OnPhase = Callable[[int, int, str], None]  # (done, total, phase): a later phase begins
Key = tuple[Item, int]  # (item, seed)


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


def new_state(checked: Checked, out: Path, doc: docs.AbRecord, resume: bool,
              progress: Progress | None, on_phase: OnPhase | None) -> RunState:
    """The state of a fresh or resumed A/B; an arm without ``run.json`` yet (killed
    right after ``ab.json``) starts afresh."""
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
