"""``abgate plan FILE``: before the A/B runs, what each gate can detect at the planned N,
and the N a target effect needs (:mod:`abgate.compare.plan`).

The per-item noise of each gate comes from a prior A/B of the same kind (``--from
AB_DIR``: its ``comparison.json``; for an experiment with ``[suites]``, each suite's
``AB_DIR/suites/NAME``) or from a short pilot that this command runs first
(``--pilot N``: the experiment at N items into ``PILOT_DIR``). The planned N is each
suite's selection (``limit``, ``sample``, or the whole suite), or ``--items``.
Alongside the paired accuracy gate the plan states the unpaired MDE at the same N
(the arms' own SEs, as if their errors were independent): the difference is what
pairing buys.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from abgate.ab.experiment import Experiment
from abgate.ab.suites import SUITES_DIR, suite_experiments
from abgate.compare.mde import mde
from abgate.compare.plan import GateSpec, gate_specs, mde_at, needed_for
from abgate.compare.policy import Policy, load_policy
from abgate.compare.stats import z_one_sided
from abgate.errors import UsageError
from abgate.records.comparison import Comparison, ComparisonDoc
from abgate.records.result import Result
from abgate.runner.documents import read_document
from abgate.suites import load_suite, select_items

__all__ = ["PlanDoc", "PlanRow", "pilot_experiment", "plan_experiment", "planned_items"]


class PlanRow(Result):
    suite: str | None = None
    arm: str | None = None
    gate: str | None = None
    unit: str | None = None
    sigma: float | None = None
    bound: bool | None = None
    n_planned: int | None = None
    distance: float | None = None  # beyond the fail threshold, detected with `power`
    detectable: float | None = None
    target: float | None = None
    n_needed: int | None = None


class PlanDoc(Result):
    kind: str = "ab-plan"
    name: str | None = None
    source: str | None = None  # the prior run or pilot the noise was read from
    power: float | None = None
    alpha: float | None = None
    rows: tuple[PlanRow, ...] = ()
    accuracy_unpaired: dict[str, float | None] = {}  # suite/arm -> unpaired MDE at N


def planned_items(exp: Experiment) -> int:
    """The items one arm of ``exp`` is asked (its selection of its suite)."""
    cfg = exp.arms[exp.baseline]
    if cfg.sample is not None:
        return cfg.sample
    if cfg.limit is not None:
        return cfg.limit
    suite = load_suite(cfg.suite, cfg.data, cfg.difficulty, cfg.synthetic_seed)
    return len(select_items(suite.items))


def _prior(directory: Path) -> dict[str, Comparison]:
    path = directory / "comparison.json"
    if not path.is_file():
        raise UsageError(f"--from {directory}: no comparison.json (not a finished A/B "
                         "directory)")
    doc = read_document(path, ComparisonDoc)
    if not doc.comparisons:
        raise UsageError(f"{path}: no candidate compared")
    return {arm: r.comparison for arm, r in doc.comparisons.items()}


def _unpaired(c: Comparison, n: int, z: float, power: float) -> float | None:
    se_a, se_b, k = c.quality.accuracy.a.se, c.quality.accuracy.b.se, c.quality.accuracy.n_items
    if se_a is None or se_b is None or not k:
        return None
    return mde(math.hypot(se_a, se_b) * math.sqrt(k) / math.sqrt(max(n, 1)), z, power)


def _row(suite: str, arm: str, spec: GateSpec, n: int, policy: Policy,
         targets: dict[str, float]) -> PlanRow:
    at = mde_at(spec, n, policy.power)
    target = targets.get(spec.name)
    return PlanRow(suite=suite, arm=arm, gate=spec.name, unit=spec.unit, sigma=spec.sigma,
                   bound=spec.bound, n_planned=n, distance=at.distance,
                   detectable=at.detectable, target=target,
                   n_needed=None if target is None else needed_for(spec, target, policy.power))


def _plans(exp: Experiment) -> dict[str, Experiment]:
    return suite_experiments(exp) if exp.suites else {exp.name: exp}


def plan_experiment(exp: Experiment, prior: Path, *, items: int | None = None,
                    targets: dict[str, float] | None = None, policy: str | None = None,
                    source: str | None = None) -> PlanDoc:
    """The plan of ``exp`` from the A/B (or pilot) recorded in ``prior``."""
    rows: list[PlanRow] = []
    unpaired: dict[str, float | None] = {}
    family = load_policy(policy if policy is not None else exp.policy)
    for name, sub in _plans(exp).items():
        directory = prior / SUITES_DIR / name if exp.suites else prior
        pol = load_policy(policy if policy is not None else sub.policy)
        n = items if items is not None else planned_items(sub)
        z = z_one_sided(pol.quality.alpha)
        for arm, comparison in _prior(directory).items():
            rows += [_row(name, arm, s, n, pol, targets or {})
                     for s in gate_specs(comparison, pol)]
            unpaired[f"{name}/{arm}"] = _unpaired(comparison, n, z, pol.power)
    return PlanDoc(name=exp.name, source=source or str(prior), power=family.power,
                   alpha=family.quality.alpha, rows=tuple(rows), accuracy_unpaired=unpaired)


def pilot_experiment(exp: Experiment, n_items: int) -> Experiment:
    """``exp`` at ``n_items`` items per suite: the short pilot a plan can be made from."""
    if n_items < 2:
        raise UsageError(f"--pilot must be at least 2 items, got {n_items}")
    arms = {arm: replace(cfg, limit=n_items, sample=None) for arm, cfg in exp.arms.items()}
    suites = {n: replace(t, limit=n_items, sample=None) for n, t in exp.suites.items()}
    return replace(exp, name=f"{exp.name}-pilot", arms=arms, suites=suites)
