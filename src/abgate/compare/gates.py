"""The gates a verdict is made of, each with its evidence in one sentence.

A gate's outcome is ``pass``, ``fail`` or ``inconclusive``:

- speed: the CI of the geometric-mean speedup entirely above ``min_speedup`` passes,
  entirely below ``-max_slowdown`` fails, anything else is inconclusive;
- quality (accuracy drop; invalid, truncated, error and repetition increases): a
  one-sided bound at ``alpha`` of the paired, item-clustered difference. The "harm"
  (drop, or increase) is ruled out below its margin -> pass; shown above it -> fail;
- sample size: at least ``min_items`` items passes, else inconclusive (never fails);
- diagnostics: only when the policy sets a limit; a plain comparison, no interval.

Inconclusive gates carry the items the MDE formula says would settle them, or say the
need is out of reach (more than ``REACH_FACTOR`` times this run's items).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from abgate.compare.mde import items_needed, mde, within_reach
from abgate.compare.policy import Policy, SpeedPolicy
from abgate.compare.stats import z_one_sided, z_two_sided
from abgate.errors import AbgateError
from abgate.records.comparison import (
    Accuracy,
    ArmAccuracy,
    ArmNames,
    Comparison,
    PairedDelta,
    SpeedMetric,
)
from abgate.records.result import Gate

__all__ = ["UNMEASURED", "Gate", "diagnostic_gates", "more_items", "quality_gates",
           "sample_size_gate", "speed_gate"]

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
# No item had the speed metric measured in both arms: the gate says so and nothing else
# (no speed, no sample count that would settle it); the verdict is then INCONCLUSIVE.
UNMEASURED = "unmeasured"

_SPEED_LABELS = {"steady_decode_tps": "steady decode tok/s", "prefill_tps": "prefill tok/s",
                 "ttft_s": "TTFT"}
_TIMES = {"steady_decode_tps": "decode time", "prefill_tps": "prefill time",
          "ttft_s": "time to first token"}
_WHY = {"nan": "NaN timings", "inf": "infinite timings", "missing": "no timing",
        "not positive": "a zero or negative timing"}


def _unmeasured_text(section: SpeedMetric) -> str:
    """``60 samples had NaN timings, 2 had no timing``; '' when every sample measured."""
    counts = sorted((section.unmeasured_samples or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {'' if i else 'sample ' if n == 1 else 'samples '}had "
                     f"{_WHY.get(why, why)}" for i, (why, n) in enumerate(counts))


def _unmeasured_gate(comparison: Comparison, policy: Policy, metric: str) -> Gate:
    section = comparison.speed[policy.speed.metric]
    why = _unmeasured_text(section) or (
        "no pair without an engine error" if not comparison.n_items else "no timings")
    evidence = (f"{_SPEED_LABELS[policy.speed.metric]} unmeasured \u2014 no item had a finite "
                f"{_TIMES[policy.speed.metric]} in both arms ({why}).")
    return Gate("speed", metric, policy.speed.min_speedup, None, None, UNMEASURED, evidence,
                -policy.speed.max_slowdown)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _pt(value: float | None) -> str:
    return "n/a" if value is None else f"{100.0 * value:+.1f} pt"


def more_items(se: float | None, n_items: int, delta: float, z: float,
               power: float) -> tuple[int | None, bool]:
    """(more items that would settle a gate, whether that need is out of reach)."""
    if se is None:
        return None, False
    needed = items_needed(se, n_items, delta, z, power)
    if needed is None:
        return None, False
    if not within_reach(needed, n_items):
        return None, True
    return max(1, needed - n_items), False


def sample_size_gate(comparison: Comparison, policy: Policy) -> Gate:
    n_items = int(comparison.n_items or 0)
    ok = n_items >= policy.min_items
    evidence = (f"{n_items} items (>= {policy.min_items} required)." if ok else
                f"Only {n_items} items; the policy needs at least {policy.min_items} before "
                "a statistical gate can decide.")
    return Gate("sample_size", "items compared (errors excluded)", float(policy.min_items),
                float(n_items), None, PASS if ok else INCONCLUSIVE, evidence,
                more_items_needed=None if ok else policy.min_items - n_items)


def _speed_outcome(observed: float, low: float, high: float, rule: SpeedPolicy,
                   arms: ArmNames, label: str, ci_text: str) -> tuple[str, str]:
    if low > rule.min_speedup and rule.min_speedup < 0:  # non-inferiority: "no slower"
        return PASS, (f"{arms.b} vs {arms.a} on {label}: {_pct(observed)} ({ci_text}): "
                      f"no slower than the tolerated {_pct(rule.min_speedup)}.")
    if low > rule.min_speedup:
        return PASS, (f"{arms.b} is {observed:.1%} faster than {arms.a} on {label} "
                      f"({ci_text}), clearing the required {_pct(rule.min_speedup)}.")
    if high < -rule.max_slowdown:
        return FAIL, (f"{arms.b} is {-observed:.1%} slower than {arms.a} on {label} "
                      f"({ci_text}), beyond the tolerated {_pct(-rule.max_slowdown)}.")
    if rule.min_speedup < 0:
        return INCONCLUSIVE, (f"{arms.b} vs {arms.a} on {label}: {_pct(observed)} "
                              f"({ci_text}) can neither rule out nor show a slowdown "
                              f"beyond the tolerated {_pct(rule.min_speedup)}")
    return INCONCLUSIVE, (f"{arms.b} vs {arms.a} on {label}: {_pct(observed)} "
                          f"({ci_text}) shows neither the required {_pct(rule.min_speedup)} "
                          f"speedup nor a slowdown beyond {_pct(-rule.max_slowdown)}")


def speed_gate(comparison: Comparison, policy: Policy) -> Gate:
    rule, arms = policy.speed, comparison.arms
    used = comparison.bootstrap.confidence
    if used is None or not math.isclose(used, rule.confidence):
        raise AbgateError(f"the comparison's intervals are at confidence {used} but the policy "
                          f"asks {rule.confidence}: call compare_samples(confidence="
                          f"{rule.confidence})")
    section = comparison.speed[rule.metric]
    sign = 1.0 if section.higher_is_better else -1.0
    label, n_items = _SPEED_LABELS[rule.metric], int(section.n_items or 0)
    metric = f"speedup on {label}: geometric mean of {arms.b}/{arms.a} per item, - 1"
    estimate, se = section.log_ratio.estimate, section.log_ratio.se
    bounds = section.log_ratio.ci
    if not section.n_pairs:
        return _unmeasured_gate(comparison, policy, metric)
    left_out = _unmeasured_text(section)
    left_out = f"; left out: {left_out}" if left_out else ""
    if estimate is None or se is None or bounds is None or None in bounds:
        return Gate("speed", metric, rule.min_speedup, None, None, INCONCLUSIVE,
                    f"{label} was measured on only {n_items} "
                    f"{'item' if n_items == 1 else 'items'}: too few for an interval"
                    f"{left_out}.", -rule.max_slowdown)
    observed = math.expm1(sign * estimate)
    low, high = sorted(math.expm1(sign * bound) for bound in bounds if bound is not None)
    ci_text = (f"{rule.confidence:.0%} CI {_pct(low)} to {_pct(high)}, {n_items} items"
               f"{left_out}")
    outcome, evidence = _speed_outcome(observed, low, high, rule, arms, label, ci_text)
    more, far = None, False
    if outcome == INCONCLUSIVE:
        z, log_obs = z_two_sided(rule.confidence), math.log1p(observed)
        edges = (math.log1p(rule.min_speedup), math.log1p(-rule.max_slowdown))
        delta = log_obs - edges[0] if log_obs > edges[0] else edges[1] - log_obs
        more, far = more_items(se, n_items, delta, z, policy.power)
        detectable = math.expm1(edges[0] + mde(se, z, policy.power))
        what = "change" if rule.min_speedup < 0 else "speedup"
        evidence += (f"; at this sample size a true {what} of {_pct(detectable)} or more "
                     f"would pass with {policy.power:.0%} power.")
    return Gate("speed", metric, rule.min_speedup, observed, (low, high), outcome, evidence,
                -rule.max_slowdown, more, far)


@dataclass(frozen=True)
class _Harm:
    """A quality gate: harm = ``sign * (B - A)`` must stay at most ``margin``."""

    name: str
    label: str
    metric: str
    section: PairedDelta | Accuracy
    sign: float
    margin: float
    describe: Callable[[float | None], str]
    level: Callable[[float | None], str]
    note: str = ""


def _arm_value(value: float | ArmAccuracy | None) -> float | None:
    if isinstance(value, ArmAccuracy):
        value = value.estimate
    return None if value is None else float(value)


def _harm_outcome(h: _Harm, low: float, high: float) -> tuple[str, str]:
    """The outcome and the clause explaining it, from the one-sided bounds of B - A."""
    pass_bound, fail_bound = (high, low) if h.sign > 0 else (low, high)
    pass_side, fail_side = ("upper", "lower") if h.sign > 0 else ("lower", "upper")
    limit = f"the allowed {h.describe(h.sign * h.margin)}"
    if h.sign * pass_bound <= h.margin:
        return PASS, f"{pass_side} bound {h.describe(pass_bound)} is within {limit}"
    if h.sign * fail_bound > h.margin:
        return FAIL, f"{fail_side} bound {h.describe(fail_bound)} is beyond {limit}"
    harm = "an increase" if h.sign > 0 else "a drop"
    return INCONCLUSIVE, (f"{pass_side} bound {h.describe(pass_bound)} cannot rule out "
                          f"{harm} beyond {limit}")


def _harm_gate(h: _Harm, arms: ArmNames, alpha: float, n_items: int,
               power: float) -> Gate:
    estimate, se = h.section.diff.estimate, h.section.diff.se
    threshold = h.sign * h.margin
    change = (f"{h.label} {arms.a} {h.level(_arm_value(h.section.a))} -> {arms.b} "
              f"{h.level(_arm_value(h.section.b))} ({h.describe(estimate)}")
    if estimate is None or se is None:
        return Gate(h.name, h.metric, threshold, estimate, None, INCONCLUSIVE,
                    f"{change}): too few items for an interval.")
    z = z_one_sided(alpha)
    low, high = estimate - z * se, estimate + z * se
    outcome, clause = _harm_outcome(h, low, high)
    more, far = None, False
    if outcome == INCONCLUSIVE:
        more, far = more_items(se, n_items, abs(h.sign * estimate - h.margin), z, power)
    evidence = f"{change}; one-sided {1 - alpha:.1%} {clause}{h.note})."
    return Gate(h.name, h.metric, threshold, estimate, (low, high), outcome, evidence,
                more_items_needed=more, out_of_reach=far)


def _level_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _level_rep(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _delta_rep(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


def quality_gates(comparison: Comparison, policy: Policy) -> list[Gate]:
    q, rule = comparison.quality, policy.quality
    rates = q.rates
    mcnemar = q.accuracy.mcnemar
    note = (f"; McNemar exact p = {mcnemar.p_value:.2g} on {mcnemar.a_only_correct} vs "
            f"{mcnemar.b_only_correct} discordant pairs")
    specs = [
        _Harm("accuracy", "Accuracy", "accuracy difference B - A (clustered by item)",
              q.accuracy, -1.0, rule.max_accuracy_drop, _pt, _level_pct, note),
        _Harm("invalid_rate", "Invalid-answer rate", "invalid-answer rate difference B - A",
              rates.invalid, 1.0, rule.max_invalid_increase, _pt, _level_pct),
        _Harm("truncated_rate", "Truncation rate", "truncated (length) rate difference B - A",
              rates.truncated, 1.0, rule.max_truncated_increase, _pt, _level_pct),
        _Harm("error_rate", "Engine error rate", "engine error rate difference B - A",
              rates.error, 1.0, rule.max_error_increase, _pt, _level_pct),
        _Harm("repetition", "Mean seq-rep-4", "mean seq-rep-4 difference B - A",
              rates.seq_rep_4, 1.0, rule.max_repetition_increase, _delta_rep, _level_rep),
    ]
    n_items = int(comparison.n_items or 0)
    return [_harm_gate(spec, comparison.arms, rule.alpha, n_items, policy.power)
            for spec in specs]


def diagnostic_gates(comparison: Comparison, policy: Policy) -> list[Gate]:
    """Gates on diagnostics, only for the limits the policy sets."""
    diag, rule, gates = comparison.diagnostics, policy.diagnostics, []
    if rule.min_identical_fraction is not None:
        same = diag.identical_outputs
        fraction = same.fraction
        ok = fraction is not None and fraction >= rule.min_identical_fraction
        gates.append(Gate(
            "identical_outputs", "fraction of pairs with identical output token IDs",
            rule.min_identical_fraction, fraction, None, PASS if ok else FAIL,
            f"{same.text} pairs have token-identical outputs; the policy requires at "
            f"least {rule.min_identical_fraction:.0%}."))
    if rule.max_mean_abs_length_change is not None:
        change = diag.output_tokens.mean_abs_diff
        ok = change is not None and change <= rule.max_mean_abs_length_change
        shown = "n/a" if change is None else f"{change:.1f}"
        gates.append(Gate(
            "length_change", "mean |output tokens B - A| per pair",
            rule.max_mean_abs_length_change, change, None, PASS if ok else FAIL,
            f"Outputs differ in length by {shown} tokens per pair on average; the policy "
            f"allows {rule.max_mean_abs_length_change:g}."))
    return gates
