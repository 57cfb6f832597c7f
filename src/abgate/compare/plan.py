"""Power planning: what each gate can detect at N items, and the N a target needs.

From a comparison (a prior run, or a short pilot) each statistical gate's per-item
standard deviation is ``sigma = SE * sqrt(n)``, the SE being the one the gate decides
with (paired and clustered by item for quality, the widened decision interval's for
speed). A gate that fails when its one-sided bound clears its fail threshold fails a
true effect ``distance`` beyond that threshold with probability ``power`` once

    distance = (z_test + z_power) * sigma / sqrt(N)           (compare/mde.py)

``detectable`` is that effect in the gate's own terms: the accuracy drop
``max_accuracy_drop + distance``, the rate increase ``margin + distance``, the slowdown
``1 - (1 - max_slowdown) * exp(-distance)``, the mean KLD ``max_mean_kld + distance``, the
top-1 agreement ``min_top1_agreement - distance``. The planned verdict's MDE is the
same computation at the run's own N (:func:`verdict_mde`, recorded in every verdict).

A pilot whose outputs agree pair for pair has a paired SE of 0; its accuracy sigma is
then the bound ``sqrt(discordance_upper)`` (the Clopper-Pearson upper bound on the share
of discordant pairs), flagged ``bound``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from abgate.compare.mde import items_needed, mde
from abgate.compare.policy import Policy
from abgate.compare.stats import z_one_sided, z_two_sided
from abgate.records.comparison import Comparison, GateMde, PairedDelta, VerdictMde

__all__ = ["GateSpec", "gate_specs", "mde_at", "needed_for", "verdict_mde"]

_RATES = {"invalid_rate": ("invalid", "max_invalid_increase"),
          "truncated_rate": ("truncated", "max_truncated_increase"),
          "error_rate": ("error", "max_error_increase"),
          "repetition": ("seq_rep_4", "max_repetition_increase")}


@dataclass(frozen=True)
class GateSpec:
    """One gate's planning inputs: ``kind`` says how distance maps to ``detectable``."""

    name: str
    sigma: float
    z: float
    threshold: float  # the fail threshold, in the gate's terms
    kind: str  # "increase" (detectable = threshold + d), "decrease", "slowdown"
    unit: str
    bound: bool = False


def _sigma(se: float | None, n: int) -> float | None:
    if se is None or n < 1 or not math.isfinite(se):
        return None
    return se * math.sqrt(n)


def _accuracy_spec(c: Comparison, policy: Policy, z: float) -> GateSpec | None:
    acc = c.quality.accuracy
    n = int(acc.n_items or 0)
    sigma = _sigma(acc.diff.se, n)
    if sigma is None:
        return None
    bound = sigma == 0.0 and c.mde.discordance_upper is not None
    if bound:
        sigma = math.sqrt(float(c.mde.discordance_upper or 0.0))
    return GateSpec("accuracy", sigma, z, policy.quality.max_accuracy_drop, "increase",
                    "accuracy drop (fraction)", bound)


def _rate_spec(name: str, section: PairedDelta, margin: float, z: float,
               n: int) -> GateSpec | None:
    sigma = _sigma(section.diff.se, n)
    if sigma is None:
        return None
    unit = "mean seq-rep-4 increase" if name == "repetition" else "rate increase (fraction)"
    return GateSpec(name, sigma, z, margin, "increase", unit)


def _speed_spec(c: Comparison, policy: Policy) -> GateSpec | None:
    section = c.speed.get(policy.speed.metric)
    if section is None:
        return None
    sigma = _sigma(section.log_ratio.se, int(section.n_items or 0))
    if sigma is None:
        return None
    return GateSpec("speed", sigma, z_two_sided(policy.speed.confidence),
                    policy.speed.max_slowdown, "slowdown",
                    f"slowdown of {policy.speed.metric} (fraction)")


def _agreement_specs(c: Comparison, policy: Policy, z: float) -> list[GateSpec]:
    section = c.agreement
    if section is None or not section.measured:
        return []
    n, rule, out = int(section.n_items or 0), policy.quality, []
    kld = _sigma(section.mean_kld.se, n)
    if kld is not None:
        out.append(GateSpec("mean_kld", kld, z, rule.max_mean_kld, "increase",
                            "mean KLD (nats)"))
    top1 = _sigma(section.top1_agreement.se, n)
    if top1 is not None:
        out.append(GateSpec("top1_agreement", top1, z, rule.min_top1_agreement,
                            "decrease", "top-1 agreement (fails at or below)"))
    return out


def gate_specs(c: Comparison, policy: Policy) -> list[GateSpec]:
    """The statistical gates of ``c`` under ``policy`` with their per-item sigma."""
    z = z_one_sided(policy.quality.alpha)
    specs = [s for s in (_speed_spec(c, policy),) if s is not None]
    if c.speed_only:
        return specs
    acc = _accuracy_spec(c, policy, z)
    specs += [acc] if acc is not None else []
    n = int(c.n_items or 0)
    for name, (field, key) in _RATES.items():
        spec = _rate_spec(name, getattr(c.quality.rates, field), float(getattr(
            policy.quality, key)), z, n)
        specs += [spec] if spec is not None else []
    return specs + _agreement_specs(c, policy, z)


def _detectable(spec: GateSpec, distance: float) -> float:
    if spec.kind == "increase":
        return spec.threshold + distance
    if spec.kind == "decrease":
        return spec.threshold - distance
    return -math.expm1(math.log1p(-spec.threshold) - distance)


def _distance(spec: GateSpec, target: float) -> float:
    if spec.kind == "increase":
        return target - spec.threshold
    if spec.kind == "decrease":
        return spec.threshold - target
    if target >= 1.0:
        return math.inf
    return math.log1p(-spec.threshold) - math.log1p(-target)


def mde_at(spec: GateSpec, n_items: int, power: float) -> GateMde:
    """What ``spec``'s gate detects with ``power`` at ``n_items`` items."""
    distance = mde(spec.sigma / math.sqrt(max(n_items, 1)), spec.z, power)
    return GateMde(distance=distance, detectable=_detectable(spec, distance),
                   unit=spec.unit, sigma=spec.sigma, bound=spec.bound)


def needed_for(spec: GateSpec, target: float, power: float) -> int | None:
    """Items for the gate to fail a true ``target`` (in its own terms) with ``power``;
    None when the target is not beyond the gate's fail threshold."""
    distance = _distance(spec, target)
    if not math.isfinite(distance) or distance <= 0.0:
        return None
    return items_needed(spec.sigma, 1, distance, spec.z, power)


def verdict_mde(c: Comparison, policy: Policy) -> VerdictMde:
    """Every statistical gate's MDE at this comparison's own size."""
    n = int(c.n_items or 0)
    return VerdictMde(power=policy.power, n_items=n,
                      gates={s.name: mde_at(s, n, policy.power)
                             for s in gate_specs(c, policy)})
