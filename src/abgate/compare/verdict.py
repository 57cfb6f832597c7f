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
neither accept nor reject.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from abgate.compare.gates import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Gate,
    diagnostic_gates,
    quality_gates,
    sample_size_gate,
    speed_gate,
)
from abgate.compare.policy import Policy

__all__ = ["ACCEPT", "EXIT_CODES", "INCONCLUSIVE_DECISION", "REJECT", "Verdict", "decide"]

ACCEPT, REJECT, INCONCLUSIVE_DECISION = "ACCEPT", "REJECT", "INCONCLUSIVE"
EXIT_CODES = {ACCEPT: 0, REJECT: 1, INCONCLUSIVE_DECISION: 3}


@dataclass(frozen=True)
class Verdict:
    """The decision, every gate behind it, and the sentences that explain it."""

    decision: str
    gates: tuple[Gate, ...]
    reasons: tuple[str, ...]
    more_samples_needed: int | None
    policy: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE (2 is reserved for usage errors)."""
        return EXIT_CODES[self.decision]

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "exit_code": self.exit_code,
            "reasons": list(self.reasons),
            "more_samples_needed": self.more_samples_needed,
            "gates": [gate.to_dict() for gate in self.gates],
            "policy": dict(self.policy),
        }


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


def _inconclusive_reasons(open_gates: list[Gate], more: int | None,
                          pairs_per_item: float) -> list[str]:
    reasons = [gate.evidence for gate in open_gates]
    if more is not None:
        reasons.append(f"About {more} more samples per arm (at {pairs_per_item:g} per item) "
                       "would let every open gate decide if the effects are as observed.")
    else:
        stuck = [gate.name for gate in open_gates if gate.more_items_needed is None]
        reasons.append("More samples would not settle " + ", ".join(stuck) + " if the "
                       "effect is as observed (it sits between the pass and fail limits).")
    return reasons


def decide(comparison: Mapping[str, Any], policy: Policy) -> Verdict:
    """Apply ``policy`` to a :func:`abgate.compare.compare_samples` result."""
    n_items = int(comparison["n_items"])
    pairs_per_item = float(comparison.get("pairs_per_item") or 1.0)
    statistical = [speed_gate(comparison, policy), *quality_gates(comparison, policy)]
    # The error-rate gate also counts the items whose every pair errored.
    n_total = int(comparison.get("n_items_total", n_items))
    statistical = [
        _hold_back(g, n_total if g.name == "error_rate" else n_items, policy.min_items)
        for g in statistical
    ]
    gates = (sample_size_gate(comparison, policy), *statistical,
             *diagnostic_gates(comparison, policy))
    failed = [gate for gate in gates if gate.outcome == FAIL]
    open_gates = [gate for gate in gates if gate.outcome == INCONCLUSIVE]
    more: int | None = None
    if failed:
        decision, reasons = REJECT, [gate.evidence for gate in failed]
    elif all(gate.outcome == PASS for gate in gates):
        decision = ACCEPT
        reasons = [gates[1].evidence, f"All {len(gates) - 2} quality and diagnostic gates "
                   "pass: " + ", ".join(gate.name for gate in gates[2:]) + "."]
    else:
        decision = INCONCLUSIVE_DECISION
        more = _more_samples(open_gates, pairs_per_item)
        reasons = _inconclusive_reasons(open_gates, more, pairs_per_item)
    return Verdict(decision, tuple(gates), tuple(reasons), more, policy.to_dict())
