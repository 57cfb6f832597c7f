"""One verdict over several suites, its family-wise error controlled by Holm.

Each suite of an experiment is its own matched A/B with its own policy (per-suite
thresholds) and verdict. Their gates are one family:

- **REJECT** is a union of tests (any gate failing rejects), so its error compounds
  with the number of gates. Every statistical gate's "harm beyond the margin" test gets
  a one-sided p-value (:func:`fail_p_value`) and the family is tested by Holm's step-down
  procedure at ``family_alpha``: sorted p-values p₍₁₎ ≤ … ≤ p₍ₘ₎, the j-th is rejected
  when every p₍ᵢ₎ ≤ α / (m − i + 1) for i ≤ j. A gate fails in the combined verdict only
  when it failed in its suite *and* Holm rejects it; a gate that failed alone but not
  after Holm is inconclusive. Gates without a p-value (lossless identity, probes,
  diagnostic limits, the sample size) are deterministic and keep their outcome.
- **ACCEPT** is an intersection of tests (every gate of every suite must pass), which
  needs no adjustment: its error is at most the largest single gate's.
- **INCONCLUSIVE** otherwise.

The p-values use the normal approximation of each gate's estimate and SE (Student-t
for the agreement gates), the SE being the one the gate decides with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import Field

from abgate.compare.gates import FAIL, INCONCLUSIVE, PASS
from abgate.compare.policy import Policy
from abgate.records.comparison import Comparison, Interval, Verdict
from abgate.records.result import ACCEPT, EXIT_CODES, INCONCLUSIVE_DECISION, REJECT, Gate, Result

__all__ = ["HolmGate", "SuiteOutcome", "SuitesVerdict", "combine", "fail_p_value",
           "holm_levels"]

_RATES = {"invalid_rate": ("invalid", "max_invalid_increase"),
          "truncated_rate": ("truncated", "max_truncated_increase"),
          "error_rate": ("error", "max_error_increase"),
          "repetition": ("seq_rep_4", "max_repetition_increase")}


@dataclass(frozen=True)
class SuiteOutcome:
    """One suite's A/B of one candidate: its comparison, verdict and policy."""

    suite: str
    arm: str
    comparison: Comparison
    verdict: Verdict
    policy: Policy


class HolmGate(Result):
    suite: str | None = None
    arm: str | None = None
    gate: str | None = None
    alone: str | None = None  # the outcome in its suite's own verdict
    p_fail: float | None = None  # one-sided p of "harm beyond the margin"; None: no test
    rank: int | None = None  # 1 = smallest p
    level: float | None = None  # Holm's level at its rank: alpha / (m - rank + 1)
    holm_rejects: bool | None = None
    outcome: str | None = None  # after Holm
    evidence: str | None = None


class SuitesVerdict(Result):
    """``suites.json``'s verdict: one decision over every suite."""

    decision: str | None = None
    exit_code: int | None = None
    reasons: tuple[str, ...] = ()
    method: str | None = None
    family_alpha: float | None = None
    n_tests: int | None = None
    suites: dict[str, str | None] = Field(default_factory=dict)  # suite -> its own decision
    gates: tuple[HolmGate, ...] = ()
    mde: dict[str, dict[str, float | None]] = Field(default_factory=dict)


def _norm_sf(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _p_beyond(harm: float | None, margin: float, se: float | None) -> float | None:
    """P(a harm this large | the true harm is the margin): 1 - Phi((harm - margin)/se)."""
    if harm is None or se is None or not math.isfinite(harm) or not math.isfinite(se):
        return None
    if se == 0.0:
        return 0.0 if harm > margin else 1.0
    return _norm_sf((harm - margin) / se)


def _t_beyond(harm: float | None, margin: float, se: float | None,
              df: int | None) -> float | None:
    if harm is None or se is None or df is None or df < 1:
        return None
    if se == 0.0:
        return 0.0 if harm > margin else 1.0
    from scipy import stats  # lazily, as in compare/stats.py

    return float(stats.t.sf((harm - margin) / se, df))


def _delta_p(section: Interval, sign: float, margin: float) -> float | None:
    estimate = section.estimate
    return _p_beyond(None if estimate is None else sign * estimate, margin, section.se)


def fail_p_value(name: str, comparison: Comparison, policy: Policy) -> float | None:
    """The one-sided p-value of gate ``name``'s failure test, None for a gate that is no
    statistical test (lossless identity, probes, diagnostics, sample size)."""
    q, rule = comparison.quality, policy.quality
    if name == "accuracy":
        return _delta_p(q.accuracy.diff, -1.0, rule.max_accuracy_drop)
    if name in _RATES:
        field, key = _RATES[name]
        return _delta_p(getattr(q.rates, field).diff, 1.0, float(getattr(rule, key)))
    if name == "speed":
        section = comparison.speed.get(policy.speed.metric)
        if section is None or section.log_ratio.estimate is None:
            return None
        sign = 1.0 if section.higher_is_better else -1.0
        # fails when the speedup is below -max_slowdown: harm = -log speedup
        return _p_beyond(-sign * section.log_ratio.estimate,
                         -math.log1p(-policy.speed.max_slowdown), section.log_ratio.se)
    agreement = comparison.agreement
    if agreement is None or not agreement.measured:
        return None
    if name == "mean_kld":
        stat = agreement.mean_kld
        return _t_beyond(stat.estimate, rule.max_mean_kld, stat.se, stat.df)
    if name == "top1_agreement":
        stat = agreement.top1_agreement
        return _t_beyond(None if stat.estimate is None else -stat.estimate,
                         -rule.min_top1_agreement, stat.se, stat.df)
    return None


def holm_levels(p_values: Sequence[float], alpha: float) -> list[tuple[int, float, bool]]:
    """(rank, level, rejected) for each p-value in input order (Holm's step-down)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m, still = len(p_values), True
    out: list[tuple[int, float, bool]] = [(0, 0.0, False)] * m
    for rank, i in enumerate(order, 1):
        level = alpha / (m - rank + 1)
        still = still and p_values[i] <= level
        out[i] = (rank, level, still)
    return out


def _gates(outcomes: Sequence[SuiteOutcome]) -> list[tuple[SuiteOutcome, Gate, float | None]]:
    sequential = {"sample_size"}  # a sequential A/B's gates are anytime-valid already
    return [(o, g, None if o.comparison.sequential is not None and g.name not in sequential
             and o.comparison.sequential.measured else
             fail_p_value(g.name, o.comparison, o.policy))
            for o in outcomes for g in o.verdict.gates]


def _holm_gate(o: SuiteOutcome, g: Gate, p: float | None,
               holm: tuple[int, float, bool] | None) -> HolmGate:
    outcome = g.outcome
    rank, level, rejects = holm if holm is not None else (None, None, None)
    if holm is not None and g.outcome == FAIL and not rejects:
        outcome = INCONCLUSIVE  # fails alone, not once the family is accounted for
    return HolmGate(suite=o.suite, arm=o.arm, gate=g.name, alone=g.outcome, p_fail=p,
                    rank=rank, level=level, holm_rejects=rejects, outcome=outcome,
                    evidence=g.evidence)


def _reasons(decision: str, gates: Sequence[HolmGate],
             outcomes: Sequence[SuiteOutcome]) -> list[str]:
    if decision == ACCEPT:
        names = ", ".join(o.suite for o in outcomes)
        return [f"ACCEPT: every gate of every suite passes ({names})."]
    if decision == REJECT:
        return [f"REJECT: suite {g.suite}: {g.gate}: {g.evidence}"
                + ("" if g.p_fail is None else
                   f" (Holm: p = {g.p_fail:.2g} <= {g.level:.2g}, rank {g.rank})")
                for g in gates if g.outcome == FAIL]
    held = [f"suite {g.suite}: {g.gate} fails alone (p = {g.p_fail:.2g}) but not after "
            f"Holm (needs p <= {g.level:.2g})" for g in gates
            if g.alone == FAIL and g.outcome != FAIL and g.p_fail is not None
            and g.level is not None]
    open_ = [f"suite {o.suite}: {o.verdict.reasons[0] if o.verdict.reasons else o.verdict.decision}"
             for o in outcomes if o.verdict.decision != ACCEPT]
    return [f"INCONCLUSIVE: {len(open_)} of {len(outcomes)} suites did not accept", *held,
            *open_]


def combine(outcomes: Sequence[SuiteOutcome], family_alpha: float) -> SuitesVerdict:
    """One verdict over ``outcomes`` (every suite x candidate), Holm at ``family_alpha``."""
    rows = _gates(outcomes)
    tested = [i for i, (_, _, p) in enumerate(rows) if p is not None]
    levels = holm_levels([rows[i][2] or 0.0 for i in tested], family_alpha)
    by_row = dict(zip(tested, levels, strict=True))
    gates = [_holm_gate(o, g, p, by_row.get(i)) for i, (o, g, p) in enumerate(rows)]
    if any(g.outcome == FAIL for g in gates):
        decision = REJECT
    elif all(o.verdict.decision == ACCEPT for o in outcomes) and all(
            g.outcome == PASS for g in gates):
        decision = ACCEPT
    else:
        decision = INCONCLUSIVE_DECISION
    method = (f"Holm step-down over the {len(tested)} statistical gates of "
              f"{len({o.suite for o in outcomes})} suites at family-wise alpha = "
              f"{family_alpha:g} (one-sided, on each gate's harm beyond its margin); "
              "ACCEPT needs every gate of every suite to pass (an intersection-union "
              "test, no adjustment needed)")
    mde = {f"{o.suite}/{o.arm}": {name: g.detectable for name, g in o.verdict.mde.gates.items()}
           if o.verdict.mde else {} for o in outcomes}
    return SuitesVerdict(decision=decision, exit_code=EXIT_CODES[decision],
                         reasons=tuple(_reasons(decision, gates, outcomes)), method=method,
                         family_alpha=family_alpha, n_tests=len(tested),
                         suites={f"{o.suite}/{o.arm}": o.verdict.decision for o in outcomes},
                         gates=tuple(gates), mde=mde)
