"""An INCONCLUSIVE verdict in one line: which evidence is missing, what would settle it,
and whether the host was too busy for the speed gate to see anything.

The host's business shows in the spread of the per-item speed ratios: both arms ran
interleaved on the same host, so a steady host leaves their ratio nearly constant from
item to item, and load bursts that hit one arm's request and not the other's spread it.
Above ``BUSY_SPREAD`` (the standard deviation of the per-item log ratio) the line says
the host was busy only when the A/B's host-load measurement (``Comparison.host_load``,
from ``abgate.host_load``) found it elevated, and otherwise what was measured
("host load was not elevated (load 0.3 ...)", or that it was not measured); a spread
that small with a speed inside the policy's band says the
change does not move the speed measurably here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from abgate.compare.gates import INCONCLUSIVE, UNMEASURED
from abgate.compare.policy import Policy
from abgate.records.comparison import Comparison
from abgate.records.load_snapshots import HostLoadFinding
from abgate.records.result import Gate

__all__ = ["BUSY_SPREAD", "explain_inconclusive", "speed_spread"]

# SD of the per-item log speed ratio above which the host is called busy: single items
# moved by 10% or more between two interleaved requests (an undisturbed host keeps it to
# a few percent, docs/statistics.md "Calibration").
BUSY_SPREAD = 0.10

_LABELS = {"sample_size": "sample size", "accuracy": "accuracy", "error_rate": "engine errors",
           "invalid_rate": "invalid answers", "truncated_rate": "truncation",
           "repetition": "repetition", "mean_kld": "mean KLD",
           "top1_agreement": "top-1 agreement", "speed": "speed"}


def speed_spread(comparison: Comparison, metric: str) -> float | None:
    """SD of the per-item log speed ratio (recorded, or from the SE and item count)."""
    section = comparison.speed.get(metric)
    if section is None:
        return None
    sd = section.log_ratio.sd
    if sd is not None and math.isfinite(sd):
        return float(sd)
    se, n = section.log_ratio.se, section.n_items
    if se is not None and n is not None and n > 1 and math.isfinite(se):
        return float(se) * math.sqrt(n)
    return None


def _label(name: str) -> str:
    return "probes" if name.startswith("probe_") else _LABELS.get(name, name.replace("_", " "))


def _speed_clause(gate: Gate, comparison: Comparison, policy: Policy) -> str:
    if gate.outcome == UNMEASURED:  # nothing measured: no speed, no host, no more samples
        return f"speed: {gate.evidence.rstrip('.')}"
    spread = speed_spread(comparison, policy.speed.metric)
    observed = gate.observed
    seen = "n/a" if observed is None else f"{observed:+.1%}"
    band = f"{-policy.speed.max_slowdown:+.0%} to {policy.speed.min_speedup:+.0%}"
    if spread is not None and spread > BUSY_SPREAD:
        return (f"speed {seen} with single items' speed ratios spread ±{spread:.0%} (SD): "
                + _host_clause(comparison.host_load))
    if observed is not None and -policy.speed.max_slowdown < observed < policy.speed.min_speedup:
        steady = "" if spread is None else f", on a steady host (spread ±{spread:.0%})"
        return (f"speed {seen} sits inside the {band} band{steady}: the change does not "
                "move this speed measurably here")
    return f"speed {seen} is not yet resolved"


def _host_clause(load: HostLoadFinding | None) -> str:
    """Why the spread is wide, as far as the host's load was measured: "busy" only when
    the measurement (``abgate.host_load``) says the load was elevated."""
    if load is None:
        return ("host load was not measured, so its interval is too wide to decide (rerun "
                "with more items, or on a quieter host)")
    if load.elevated:
        return (f"the host was busy ({load.text}), so its interval is too wide to "
                "decide (rerun on a quieter host, or with more items)")
    return (f"host load was not elevated ({load.text}), so its interval is too wide "
            "to decide (rerun with more items)")


def explain_inconclusive(gates: Sequence[Gate], comparison: Comparison, policy: Policy,
                         more_samples: int | None, notes: Sequence[str] = ()) -> str:
    """One line: ``INCONCLUSIVE at 40 items: accuracy, truncation could not yet show
    non-inferiority (about 380 more samples per arm would settle them); speed ...``."""
    open_gates = [g for g in gates if g.outcome in (INCONCLUSIVE, UNMEASURED)]
    names = [g.name for g in open_gates]
    quality = list(dict.fromkeys(_label(n) for n in names if n not in ("speed", "sample_size")))
    parts = []
    if "sample_size" in names:
        parts.append(f"only {comparison.n_items} items (the policy needs "
                     f"{policy.min_items})")
    if quality:
        parts.append(", ".join(quality) + " could not yet show non-inferiority")
    speed = next((g for g in open_gates if g.name == "speed"), None)
    if speed is not None:
        parts.append(_speed_clause(speed, comparison, policy))
    missing = [n.split(":", 1)[0] for n in notes if "not measured" in n or "not compared" in n]
    if missing:
        parts.append("missing evidence: " + "; ".join(missing))
    more = (f" (about {more_samples} more samples per arm would settle every open gate if "
            "the effects are as observed)" if more_samples is not None else "")
    return (f"INCONCLUSIVE at {comparison.n_items} items: " + "; ".join(parts)
            + more + ".")
