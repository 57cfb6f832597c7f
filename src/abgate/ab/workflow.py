"""The A/B workflow as one library call: run the arms, analyse, diff weights, report.

``abgate ab`` is a thin wrapper over :func:`run_experiment`; anything that wants an A/B
with its verdict and reports (a script, a CI job, a notebook) calls the same function.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.ab.analyze import analyze
from abgate.ab.experiment import Experiment
from abgate.ab.run import AbOutcome, Progress, prepare_arms, run_ab
from abgate.redact import redact
from abgate.runner.provenance import ProvenanceOptions


@dataclass(frozen=True)
class AbResult:
    """How the arms ran, the comparison (``comparison.json``) and the report files."""

    outcome: AbOutcome
    comparison: dict[str, Any]
    reports: list[Path]

    @property
    def exit_code(self) -> int:
        """130 when interrupted, else the verdict's (0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE)."""
        if self.outcome.status == "interrupted":
            return 130
        return int(self.comparison["exit_code"])


def diff_weights(exp: Experiment, out: Path) -> list[Path]:
    """``weights-diff-<arm>.json`` for each candidate whose model differs from the
    baseline's (needs ``abgate[weights]``); the report shows them."""
    from abgate.weights import diff_checkpoints

    prepared = prepare_arms(exp)  # identities come from the hash cache: no re-hashing
    base = prepared[exp.baseline].engine.model
    written = []
    for arm in exp.candidates:
        model = prepared[arm].engine.model
        if model != base:
            doc = diff_checkpoints(Path(base), Path(model))
            path = out / f"weights-diff-{arm}.json"
            path.write_text(json.dumps(redact(doc), indent=1) + "\n")
            written.append(path)
    return written


def run_experiment(exp: Experiment, out: Path, *, resume: bool = False, force: bool = False,
                   on_start: Callable[[int, int], None] | None = None,
                   progress: Progress | None = None,
                   provenance: ProvenanceOptions | None = None,
                   weights_diff: bool = False, policy: str | None = None) -> AbResult:
    """Run ``exp`` into ``out`` (or finish it with ``resume``) and write its verdict and
    reports. Bad input raises UsageError before anything is written."""
    outcome = run_ab(exp, out, resume=resume, force=force, on_start=on_start,
                     progress=progress, provenance=provenance, policy=policy)
    comparison = analyze(out, policy)
    if weights_diff:
        diff_weights(exp, out)
    from abgate.report import write_reports

    return AbResult(outcome, comparison, write_reports(out))
