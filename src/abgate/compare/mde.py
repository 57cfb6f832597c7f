"""Minimum detectable effect (MDE) and the sample size a gate needs.

With a standard error ``SE`` measured on ``n`` items, the per-item standard deviation
is ``sigma = SE * sqrt(n)``. A test that decides when a confidence bound clears a
threshold (bound = estimate -/+ z_test * SE) detects a true distance ``delta`` from
that threshold with probability ``power`` once

    delta >= (z_test + z_power) * sigma / sqrt(n)          (MDE at n items)

so the items needed for a distance ``delta`` are

    n_needed = ceil(((z_test + z_power) * sigma / delta)^2).

``z_test`` is ``z_(1-alpha)`` for a one-sided test at ``alpha`` (``z_((1+c)/2)`` for the
bound of a two-sided ``c`` interval) and ``z_power = z_(power)`` (0.84 for 80%).

A need beyond :data:`REACH_FACTOR` times the items of the run is *out of reach*: the
normal approximation behind the formula says little that far out (an effect that
small at a floor or ceiling rate is not what a bigger run would measure), and "about
479,167 more samples" reads as advice when it is not. :func:`within_reach` says which.
"""

from __future__ import annotations

import math

__all__ = ["REACH_FACTOR", "items_needed", "mde", "within_reach"]

REACH_FACTOR = 10


def _z_power(power: float) -> float:
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    from scipy import stats  # lazily: scipy.stats is most of the CLI's start-up

    return float(stats.norm.ppf(power))


def mde(se: float, z_test: float, power: float) -> float:
    """Smallest true effect detected with ``power`` at the SE measured: ``(z+z_p)*SE``."""
    if math.isnan(se):
        return math.nan
    return (z_test + _z_power(power)) * se


def items_needed(se: float, n_items: int, delta: float, z_test: float,
                 power: float) -> int | None:
    """Items needed for the MDE to shrink to ``delta``; None when it cannot be computed.

    None for a non-positive or nan ``delta`` (no distance to detect), a nan SE, or no
    items. A zero SE needs no more items than there are.
    """
    if n_items <= 0 or math.isnan(se) or math.isnan(delta) or delta <= 0.0:
        return None
    sigma = se * math.sqrt(n_items)
    if sigma == 0.0:
        return n_items
    return max(1, math.ceil(((z_test + _z_power(power)) * sigma / delta) ** 2))


def within_reach(needed: int, n_items: int) -> bool:
    """Whether ``needed`` items is at most :data:`REACH_FACTOR` times ``n_items``."""
    return needed <= REACH_FACTOR * max(n_items, 1)
