"""The verdict: ACCEPT, REJECT or INCONCLUSIVE from a comparison and a policy.

- REJECT: any gate fails (a quality gate shows harm beyond its margin, B is
  significantly slower than the tolerance, or a diagnostic limit the policy set is
  broken).
- ACCEPT: every gate passes: B is faster by at least ``min_speedup`` (CI lower bound)
  and every quality gate *shows* non-inferiority (not merely "did not fail").
- INCONCLUSIVE: otherwise, with the samples per arm the MDE formula says would settle
  every open gate (None when some open gate cannot be settled by more samples at the
  effect observed, e.g. identical arms, whose speed difference is inside the band
  between ``-max_slowdown`` and ``+min_speedup``).

Below ``min_items`` no statistical gate may fail: its outcome is reported as
inconclusive (with the would-be outcome in its evidence), so a handful of items can
neither accept nor reject. The distribution-agreement gates count the items that were
scored; lossless and probe gates are not statistical and are never held back.

An arm flagged as running random weights (``comparison.speed_only``) gets the
sample-size and speed gates only. The first reason names the evidence that decided,
e.g. ``"REJECT: distribution agreement: mean KLD 0.83 nats ..."``; ``notes`` say which
evidence was not measured.
"""

from __future__ import annotations

import dataclasses
import math

from abgate.compare.agreement_gates import (
    agreement_gates,
    evidence_notes,
    lossless_gates,
    measured_agreement,
    probe_gates,
)
from abgate.compare.explain import explain_inconclusive
from abgate.compare.gates import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNMEASURED,
    diagnostic_gates,
    quality_gates,
    sample_size_gate,
    speed_gate,
)
from abgate.compare.mde import REACH_FACTOR
from abgate.compare.plan import verdict_mde
from abgate.compare.policy import Policy
from abgate.records.comparison import Comparison, Sequential, Verdict
from abgate.records.result import ACCEPT, EXIT_CODES, INCONCLUSIVE_DECISION, REJECT, Gate

__all__ = ["ACCEPT", "EXIT_CODES", "INCONCLUSIVE_DECISION", "REJECT", "Verdict", "decide"]

# The evidence a decision names first, most direct first; a gate's label in reasons.
_PRIORITY = ("sample_size", "lossless_outputs", "lossless_kld", "mean_kld", "top1_agreement",
             "probe_", "accuracy", "error_rate", "invalid_rate", "truncated_rate",
             "repetition", "identical_outputs", "length_change", "speed")
_LABELS = {"sample_size": "sample size", "lossless_outputs": "lossless outputs",
           "lossless_kld": "lossless numerics", "mean_kld": "distribution agreement",
           "top1_agreement": "distribution agreement", "accuracy": "accuracy",
           "error_rate": "engine errors", "invalid_rate": "invalid answers",
           "truncated_rate": "truncation", "repetition": "repetition",
           "identical_outputs": "output identity", "length_change": "output length",
           "speed": "speed"}


def _rank(gate: Gate) -> int:
    name = "probe_" if gate.name.startswith("probe_") else gate.name
    return _PRIORITY.index(name) if name in _PRIORITY else len(_PRIORITY)


def _label(gate: Gate) -> str:
    return "probe" if gate.name.startswith("probe_") else _LABELS.get(gate.name, gate.name)


def _headline(decision: str, gates: list[Gate]) -> list[str]:
    """Evidence of ``gates``, the most direct first, prefixed by the decision."""
    ordered = sorted(gates, key=_rank)
    first = f"{decision}: {_label(ordered[0])}: {ordered[0].evidence}"
    return [first, *(gate.evidence for gate in ordered[1:])]


def _hold_back(gate: Gate, n_items: int, min_items: int) -> Gate:
    """Below ``min_items`` a statistical gate cannot fail: report it as inconclusive."""
    if gate.outcome != FAIL or n_items >= min_items:
        return gate
    return dataclasses.replace(
        gate, outcome=INCONCLUSIVE, more_items_needed=min_items - n_items,
        evidence=f"{gate.evidence[:-1]}; it would fail, but {n_items} items < min_items "
                 f"{min_items}.")


def _samples(items: int, pairs_per_item: float) -> int:
    return math.ceil(items * pairs_per_item)


def _more_samples(open_gates: list[Gate], pairs_per_item: float) -> int | None:
    needs = [gate.more_items_needed for gate in open_gates]
    if not needs or any(need is None for need in needs):
        return None
    return _samples(max(need for need in needs if need is not None), pairs_per_item)


def _inconclusive_reasons(open_gates: list[Gate], more: int | None, pairs_per_item: float,
                          n_items: int) -> list[str]:
    reasons = _headline(INCONCLUSIVE_DECISION, open_gates)
    if more is not None:
        reasons.append(f"About {more} more samples per arm (at {pairs_per_item:g} per item) "
                       "would let every open gate decide if the effects are as observed.")
        return reasons
    far = [gate.name for gate in open_gates if gate.out_of_reach]
    # "would not settle" only of a gate with an interval between its limits: one that
    # has no interval (too few items) or no measurement at all says so in its evidence
    stuck = [gate.name for gate in open_gates if gate.more_items_needed is None
             and not gate.out_of_reach and gate.ci is not None and gate.outcome != UNMEASURED]
    if far:
        reasons.append("Out of reach at this effect size: settling " + ", ".join(far) +
                       f" would take more than {REACH_FACTOR}x this run's {n_items} items.")
    if stuck:
        reasons.append("More samples would not settle " + ", ".join(stuck) + " if the "
                       "effect is as observed (it sits between the pass and fail limits).")
    return reasons


def _sequential_gates(comparison: Comparison, section: Sequential,
                      policy: Policy) -> tuple[Gate, ...]:
    """A sequential A/B: the anytime-valid gates at the stopping look (they need no
    ``min_items``: the sample-size gate records the items the sequence used), then the
    non-statistical gates as in a fixed-N verdict."""
    n = int(section.n_items or 0)
    size = Gate("sample_size", "items in the sequence at the stopping look", None, float(n),
                None, PASS, f"{n} items looked at sequentially (every "
                f"{section.look_every}, at most {section.max_items}).")
    gates = section.gates
    if comparison.speed_only:
        return (size, *gates)
    return (size, *gates, *diagnostic_gates(comparison, policy),
            *lossless_gates(comparison, policy), *probe_gates(comparison))


def _measured_sequential(comparison: Comparison) -> Sequential | None:
    section = comparison.sequential
    return section if section is not None and section.measured else None


def _gates(comparison: Comparison, policy: Policy) -> tuple[Gate, ...]:
    section = _measured_sequential(comparison)
    if section is not None:
        return _sequential_gates(comparison, section, policy)
    n_items = int(comparison.n_items or 0)
    speed_only = bool(comparison.speed_only)
    statistical = [speed_gate(comparison, policy)]
    if not speed_only:
        statistical += quality_gates(comparison, policy)
    # The error-rate gate also counts the items whose every pair errored.
    n_total = int(n_items if comparison.n_items_total is None else comparison.n_items_total)
    statistical = [
        _hold_back(g, n_total if g.name == "error_rate" else n_items, policy.min_items)
        for g in statistical
    ]
    if speed_only:
        return (sample_size_gate(comparison, policy), *statistical)
    agreement = measured_agreement(comparison)
    scored_items = int(agreement.n_items or 0) if agreement is not None else 0
    scored = [_hold_back(g, scored_items, policy.min_items)
              for g in agreement_gates(comparison, policy)]
    decide = policy.diagnostics.decide  # False: identity and length never decide
    return (sample_size_gate(comparison, policy), *statistical,
            *(diagnostic_gates(comparison, policy) if decide else []), *scored,
            *(lossless_gates(comparison, policy) if decide else []), *probe_gates(comparison))


def _reported_only(comparison: Comparison, policy: Policy) -> list[str]:
    """With ``[diagnostics] decide = false``: the identity evidence, reported only."""
    if policy.diagnostics.decide or comparison.speed_only:
        return []
    same = comparison.diagnostics.identical_outputs.text
    change = comparison.diagnostics.output_tokens.mean_abs_diff
    notes = [f"Reported, not deciding (policy {policy.name!r}: identity and length never "
             f"reject alone): {same or 'n/a'} pairs token-identical; mean absolute length "
             f"change {'n/a' if change is None else f'{change:.1f}'} tokens per pair."]
    for gate in lossless_gates(comparison, policy):
        notes.append(f"Reported, not deciding: lossless {gate.outcome}: {gate.evidence}")
    return notes


def _notes(comparison: Comparison, policy: Policy) -> tuple[str, ...]:
    """How a sequential A/B stopped, evidence not measured, evidence reported but not
    deciding, and the differences between the arms a reader must not miss
    (``difference_warnings``)."""
    warnings = tuple(str(w) for w in comparison.difference_warnings)
    seq = _measured_sequential(comparison)
    head: tuple[str, ...] = ()
    if seq is not None:
        when = (f"stopped early after {seq.stopped_at} of at most {seq.max_items} "
                f"items, decided by {', '.join(seq.decided_by)}"
                if seq.stopped_early else
                f"looked at every {seq.look_every} items up to {seq.n_items}")
        head = (f"Sequential A/B: {when}; guarantee: {seq.guarantee}.",)
    if comparison.speed_only:
        return (*head, f"Quality gates skipped: {comparison.speed_only}.", *warnings)
    return (*head, *evidence_notes(comparison), *_reported_only(comparison, policy),
            *warnings)


def decide(comparison: Comparison, policy: Policy) -> Verdict:
    """Apply ``policy`` to a :func:`abgate.compare.compare_samples` result (with the
    optional ``agreement``, ``probes``, ``expect`` and ``speed_only`` extras)."""
    n_items = int(comparison.n_items or 0)
    pairs_per_item = float(comparison.pairs_per_item or 1.0)
    gates = _gates(comparison, policy)
    failed = [gate for gate in gates if gate.outcome == FAIL]
    open_gates = [gate for gate in gates if gate.outcome in (INCONCLUSIVE, UNMEASURED)]
    more: int | None = None
    if failed:
        decision, reasons = REJECT, _headline(REJECT, failed)
    elif all(gate.outcome == PASS for gate in gates):
        decision = ACCEPT
        rest = [gate.name for gate in gates if gate.name not in ("sample_size", "speed")]
        reasons = [f"ACCEPT: speed: {gates[1].evidence}",
                   # "pass (...)", not "pass: ...": a "pass: value" pair reads as a
                   # password to the report's redaction (abgate.redact)
                   f"All {len(rest)} quality and diagnostic gates pass (" + ", ".join(rest)
                   + ")." if rest else "No quality gate applies."]
    else:
        decision = INCONCLUSIVE_DECISION
        more = _more_samples(open_gates, pairs_per_item)
        reasons = _inconclusive_reasons(open_gates, more, pairs_per_item, n_items)
        seq = _measured_sequential(comparison)
        if seq is not None:
            reasons = [*_headline(INCONCLUSIVE_DECISION, open_gates),
                       f"Sequential: no gate failed and not every gate passed after "
                       f"{seq.n_items} items (at most {seq.max_items})."]
    notes = _notes(comparison, policy)
    explanation = None
    if decision == INCONCLUSIVE_DECISION:
        explanation = explain_inconclusive(gates, comparison, policy, more, notes)
    return Verdict(decision=decision, exit_code=EXIT_CODES[decision], reasons=tuple(reasons),
                   more_samples_needed=more, gates=tuple(gates), policy=policy,
                   notes=notes, explanation=explanation, mde=verdict_mde(comparison, policy))
