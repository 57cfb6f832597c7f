"""Several suites, one verdict: each ``[suites.NAME]`` of an experiment runs as its own
matched A/B in ``OUT/suites/NAME/`` (under its own policy: per-suite thresholds), then
:func:`abgate.compare.holm.combine` decides over every gate of every suite with Holm.

``OUT/suites.json`` holds the combined verdict (:class:`SuitesDoc`), ``OUT/suites.md``
states it, the method (Holm, the family-wise alpha) and every gate's p-value, level and
MDE. Every suite is checked (engines prepared, data read, policy loaded) before any of
them runs, so bad input in the last suite is refused before the first one starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from abgate import safefs
from abgate.ab.checks import check_experiment
from abgate.ab.experiment import Experiment
from abgate.ab.suite_table import suite_config
from abgate.ab.workflow import AbResult, run_experiment
from abgate.compare.holm import SuiteOutcome, SuitesVerdict, combine
from abgate.compare.policy import load_policy
from abgate.errors import UsageError
from abgate.records.result import Result
from abgate.runner.provenance import ProvenanceOptions

__all__ = ["SUITES_DIR", "SUITES_FILE", "SuitesDoc", "SuitesResult", "run_suites",
           "suite_experiments"]

SUITES_DIR, SUITES_FILE, SUITES_MD = "suites", "suites.json", "suites.md"


class SuitesDoc(Result):
    """``suites.json``: the experiment's name, each suite's A/B directory, the verdict."""

    kind: str = "ab-suites"
    name: str | None = None
    baseline: str | None = None
    directories: dict[str, str] = {}
    verdict: SuitesVerdict = SuitesVerdict()


@dataclass(frozen=True)
class SuitesResult:
    doc: SuitesDoc
    results: dict[str, AbResult]
    reports: list[Path]

    @property
    def exit_code(self) -> int:
        if any(r.outcome.status == "interrupted" for r in self.results.values()):
            return 130
        return int(self.doc.verdict.exit_code or 0)


def suite_experiments(exp: Experiment) -> dict[str, Experiment]:
    """One plain experiment per suite: every arm asking that suite's items."""
    return {name: replace(exp, name=f"{exp.name}-{name}", suites={},
                          policy=table.policy if table.policy is not None else exp.policy,
                          arms={arm: suite_config(cfg, table) for arm, cfg in exp.arms.items()})
            for name, table in exp.suites.items()}


def _outcomes(name: str, result: AbResult, policy_path: str | None) -> list[SuiteOutcome]:
    doc = result.comparison
    policy = load_policy(policy_path)
    return [SuiteOutcome(name, arm, r.comparison, r.verdict, policy)
            for arm, r in doc.comparisons.items()]


def _markdown(doc: SuitesDoc) -> str:
    v = doc.verdict
    lines = [f"# {doc.name}: {v.decision} over {len(doc.directories)} suites", "",
             *(f"- {r}" for r in v.reasons), "", f"Multiplicity: {v.method}.", "",
             "| suite | decision | directory |", "| --- | --- | --- |"]
    lines += [f"| {key} | {decision} | {doc.directories.get(key.split('/')[0], '')} |"
              for key, decision in v.suites.items()]
    lines += ["", "| suite | gate | alone | p (fail) | Holm rank | level | outcome | MDE |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for g in v.gates:
        mde = v.mde.get(f"{g.suite}/{g.arm}", {}).get(g.gate or "")
        lines.append(f"| {g.suite} | {g.gate} | {g.alone} | "
                     f"{'-' if g.p_fail is None else f'{g.p_fail:.3g}'} | "
                     f"{'-' if g.rank is None else g.rank} | "
                     f"{'-' if g.level is None else f'{g.level:.3g}'} | {g.outcome} | "
                     f"{'-' if mde is None else f'{mde:.4g}'} |")
    return "\n".join(lines) + "\n"


def _claim(out: Path, resume: bool, force: bool) -> None:
    if (out / SUITES_FILE).exists() and not (resume or force):
        raise UsageError(f"{out} already holds a suites A/B ({SUITES_FILE}); give --force to "
                         "replace it or --resume to finish it")
    for path in (out, out / SUITES_DIR):
        safefs.refuse_link(path)
        path.mkdir(parents=True, exist_ok=True)


def run_suites(exp: Experiment, out: Path, *, resume: bool = False, force: bool = False,
               provenance: ProvenanceOptions | None = None, policy: str | None = None,
               run: Callable[..., AbResult] = run_experiment, **kwargs: Any) -> SuitesResult:
    """Every suite of ``exp`` as its own A/B under ``out/suites/``, then one verdict."""
    subs = suite_experiments(exp)
    for sub in subs.values():  # bad input in any suite: refused before any suite runs
        check_experiment(sub, provenance, policy)
    _claim(out, resume, force)
    results: dict[str, AbResult] = {}
    outcomes: list[SuiteOutcome] = []
    for name, sub in subs.items():
        results[name] = run(sub, out / SUITES_DIR / name, resume=resume, force=force,
                            provenance=provenance, policy=policy, **kwargs)
        outcomes += _outcomes(name, results[name], policy if policy is not None else sub.policy)
    family = load_policy(policy if policy is not None else exp.policy)
    doc = SuitesDoc(name=exp.name, baseline=exp.baseline,
                    directories={n: str(Path(SUITES_DIR) / n) for n in subs},
                    verdict=combine(outcomes, family.quality.alpha))
    safefs.write_atomic(out / SUITES_FILE, (doc.model_dump_json(indent=1) + "\n").encode())
    safefs.write_atomic(out / SUITES_MD, _markdown(doc).encode())
    return SuitesResult(doc, results, [out / SUITES_FILE, out / SUITES_MD])
