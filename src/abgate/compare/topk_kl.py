"""A lower bound of KL(P || Q) when only some token probabilities are known (pure).

Served engines report the top-k log-probabilities at each position (vLLM's
``prompt_logprobs``, llama.cpp server's ``n_probs``), not the whole distribution. Two
steps give a bound that is never above the full KL:

1. Coarsen the vocabulary into cells: each token whose baseline probability is known
   (the baseline's top-k and the scored token) is a cell, everything else is one
   remainder cell. By the data-processing inequality the KL between the two coarse
   distributions is at most the full KL.
2. The candidate's probability of a cell may be unknown (a baseline top token outside
   the candidate's top-k). It lies in ``[0, cap]``, where ``cap`` is the smallest
   probability the candidate reported (else it would have been in its top-k), and the
   remainder cell holds at least the candidate's known mass outside the baseline's
   cells. The bound takes the *smallest* coarse KL any candidate distribution
   consistent with what was reported could give: minimising ``sum p log(p/q)`` over the
   unknown ``q`` with their sum fixed puts ``q`` proportional to ``p`` clipped to the
   bounds (water-filling), found by bisection on the proportionality constant.

Reported probabilities are rounded, so the mass they leave unreported is taken to be
at least ``ROUNDING`` (else a top-k summing to 1.0000001 would leave the candidate's
remainder at 0 against a baseline's 1e-7, an infinite KL). With both distributions
known in full, use the exact KL instead; with k equal to the
vocabulary the bound is exact. Where the two top-k sets are disjoint the bound is still
large: the baseline's likely tokens can have at most ``cap`` under the candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

__all__ = ["kl_lower_bound"]

_BISECT_STEPS = 80
ROUNDING = 1e-5  # the mass a sum of rounded reported probabilities can be off by


def _fill(p: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64],
          total: float) -> NDArray[np.float64]:
    """``q = clip(p * s, lo, hi)`` with ``sum(q) == total`` (``p > 0``), bisecting on
    log ``s``; ``total`` is clamped to what the bounds allow."""
    total = min(max(total, float(lo.sum())), float(hi.sum()))
    low, high = -80.0, 80.0  # log of the scale: exp(-80) * p is below any bound
    for _ in range(_BISECT_STEPS):
        mid = (low + high) / 2.0
        if float(np.clip(p * math.exp(mid), lo, hi).sum()) < total:
            low = mid
        else:
            high = mid
    return np.clip(p * math.exp(high), lo, hi)


def _kl_terms(p: NDArray[np.float64], q: NDArray[np.float64]) -> float:
    """``sum p log(p/q)`` with ``0 log 0 = 0`` and ``inf`` where ``q = 0 < p``."""
    live = p > 0
    if np.any(q[live] <= 0):
        return math.inf
    return float(np.sum(p[live] * (np.log(p[live]) - np.log(q[live]))))


def kl_lower_bound(base: Mapping[int, float], cand: Mapping[int, float],
                   cand_kth: float) -> float:
    """A lower bound of KL(baseline || candidate) at one position.

    ``base``/``cand``: token ID -> natural-log probability, for the tokens each arm
    reported; ``cand_kth``: the smallest probability in the candidate's top-k list when
    that list is full (no unreported token can be more likely), else 1. A token missing
    from ``cand`` has at most that, and at most the mass ``cand`` leaves unreported
    (never taken below ``ROUNDING``). Never negative.
    """
    ids = list(base)
    p = np.exp(np.array([base[i] for i in ids], dtype=np.float64))
    p_rest = max(0.0, 1.0 - float(p.sum()))
    known = np.array([i in cand for i in ids], dtype=bool)
    q_known = np.exp(np.array([cand[i] for i in ids if i in cand], dtype=np.float64))
    outside = float(np.exp(np.array([v for i, v in cand.items() if i not in base],
                                    dtype=np.float64)).sum())
    # reported probabilities are rounded (float32 on the server, a few digits in JSON),
    # so what they leave over is known only to within ROUNDING: never less than that
    free_mass = max(ROUNDING, 1.0 - float(q_known.sum()))
    unreported = 1.0 - math.fsum(math.exp(v) for v in cand.values())
    cap = min(max(cand_kth, 0.0), max(ROUNDING, unreported), 1.0)
    # the free cells: the baseline's tokens the candidate did not report, and the rest
    p_free = np.append(p[~known], p_rest)
    lo = np.append(np.zeros(int((~known).sum())), min(outside, free_mass))
    hi = np.append(np.full(int((~known).sum()), cap), 1.0)
    live = p_free > 0
    # cells the baseline gives no mass cost nothing: they take as little as they must
    target = free_mass - float(lo[~live].sum())
    q_free = lo.copy()
    if np.any(live):
        q_free[live] = _fill(p_free[live], lo[live], hi[live], target)
    kl = _kl_terms(p[known], q_known) + _kl_terms(p_free, q_free)
    return max(kl, 0.0)
