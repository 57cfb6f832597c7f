"""Anytime-valid confidence sequences (pure, deterministic functions).

A confidence sequence (CS) is a sequence of intervals, one after every observation,
that holds the true mean at *every* time at once with probability at least 1 - alpha:
a decision may be taken at any look, as often as one likes, and stopping as soon as an
interval clears a limit keeps the error rate. Two constructions:

- :func:`betting_bounds`: observations in [0, 1] (a bounded transform of the per-item
  statistic). The hedged-capital betting CS with the predictable plug-in bet of
  Waudby-Smith & Ramdas (2023, "Estimating means of bounded random variables by
  betting", JRSS-B, Theorem 3 and eq. 26-27), one side at a time: the lower bound at
  time t is the smallest m whose capital ``prod_i (1 + lambda_i(m) (x_i - m))`` is below
  ``1/alpha`` (Ville's inequality: a nonnegative martingale under the mean m reaches
  ``1/alpha`` with probability at most alpha). Valid at every sample size, for any
  distribution on [0, 1]; no burn-in needed.
- :func:`mixture_bounds`: unbounded observations (paired log speed ratios). The
  asymptotic CS of Waudby-Smith, Arnold, Wu, Wang & Ramdas (2024, "Time-uniform central
  limit theory and asymptotic confidence sequences", Ann. Statist.): Robbins' normal
  mixture boundary with the running sample standard deviation. Valid as the sample
  grows (a burn-in keeps it away from the smallest samples; the A/A replay in
  ``benchmarks/sequential_calibration.py`` measures its error rate).

Both return, for every prefix ``x[:t]`` (t = 1..n), the running intersection of the
intervals so far (so a bound never loosens and a decision never flips back).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = ["BET_CAP", "GRID", "betting_bounds", "mixture_bounds"]

FloatArray = NDArray[np.float64]
# Candidate means on [0, 1] the capital is computed for; bounds are rounded outwards to
# this grid (a step of 1/1000 of the range).
GRID = 1001
# Largest fraction of the capital that may be lost on one observation (the bet against
# mean m is at most c/m, or c/(1-m): Waudby-Smith & Ramdas's truncation, with c < 1 so
# the capital stays positive). The plug-in bet itself is not capped at c as in their
# eq. 26, so a gate whose values sit far from its limit (a broken arm, identical
# outputs) bets close to the most Ville's inequality allows and decides quickly.
BET_CAP = 0.8


def _plugin_bets(x: FloatArray, alpha: float) -> FloatArray:
    """The predictable plug-in bets lambda_t (eq. 26-27, one-sided, before truncation):
    each uses only x_1..x_{t-1} (the running variance, regularised towards 1/4)."""
    t = np.arange(1, x.size + 1, dtype=float)
    mean = (0.5 + np.cumsum(x)) / (t + 1.0)
    var = (0.25 + np.cumsum((x - mean) ** 2)) / (t + 1.0)
    var_prev = np.concatenate([[0.25], var[:-1]])
    out: FloatArray = np.sqrt(2.0 * math.log(1.0 / alpha) / (var_prev * t * np.log1p(t)))
    return out


def _log_capital(x: FloatArray, lam: FloatArray, grid: FloatArray, up: bool) -> FloatArray:
    """log capital, shape (t, grid), of betting that the mean is above (``up``) or below
    each grid value m: ``sum_i log(1 +/- min(lambda_i, c/m or c/(1-m)) (x_i - m))``."""
    room = grid if up else 1.0 - grid
    with np.errstate(divide="ignore"):
        cap = np.where(room > 0, BET_CAP / np.maximum(room, 1e-300), np.inf)
    bets = np.minimum(lam[:, None], cap[None, :])
    sign = 1.0 if up else -1.0
    steps = 1.0 + sign * bets * (x[:, None] - grid[None, :])
    return np.cumsum(np.log(np.maximum(steps, 1e-300)), axis=0)


def betting_bounds(values: FloatArray | list[float], alpha: float,
                   grid: int = GRID) -> tuple[FloatArray, FloatArray]:
    """(lower, upper) after each observation of ``values`` (each in [0, 1]): every
    lower bound errs (is above the mean at some time) with probability <= alpha, and so
    does every upper bound; running intersections, rounded outwards to the grid."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    x = np.asarray(values, dtype=float)
    if x.size and (np.any(~np.isfinite(x)) or x.min() < 0.0 or x.max() > 1.0):
        raise ValueError("betting_bounds needs values in [0, 1]")
    if not x.size:
        return np.zeros(0), np.zeros(0)
    ms = np.linspace(0.0, 1.0, grid)
    lam = _plugin_bets(x, alpha)
    level = math.log(1.0 / alpha)
    low_ok = _log_capital(x, lam, ms, up=True) < level  # m not excluded from below
    high_ok = _log_capital(x, lam, ms, up=False) < level
    step = 1.0 / (grid - 1)
    first = np.argmax(low_ok, axis=1)  # the capital falls as m rises: first m kept
    last = grid - 1 - np.argmax(high_ok[:, ::-1], axis=1)
    lower = np.where(low_ok.any(axis=1), np.maximum(ms[first] - step, 0.0), 1.0)
    upper = np.where(high_ok.any(axis=1), np.minimum(ms[last] + step, 1.0), 0.0)
    return np.maximum.accumulate(lower), np.minimum.accumulate(upper)


def mixture_bounds(values: FloatArray | list[float], alpha: float, opt_n: int = 20,
                   start: int = 2) -> tuple[FloatArray, FloatArray]:
    """(lower, upper) after each observation: the two-sided asymptotic CS at level
    ``1 - alpha`` (both bounds together err with probability <= alpha, asymptotically),
    tightest near ``opt_n`` observations; running intersections from the ``start``-th
    observation on (the burn-in: before it the bounds are infinite, and the variance
    of a handful of values never narrows a later bound)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if opt_n < 1:
        raise ValueError(f"opt_n must be >= 1, got {opt_n}")
    x = np.asarray(values, dtype=float)
    n = x.size
    t = np.arange(1, n + 1, dtype=float)
    mean = np.cumsum(x) / t
    sq = np.cumsum(x * x)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.maximum(sq - t * mean * mean, 0.0) / (t - 1.0)
    # rho^2 minimising the boundary at opt_n (their eq. after Theorem 2.2)
    rho2 = (-2.0 * math.log(alpha) + math.log(-2.0 * math.log(alpha) + 1.0)) / opt_n
    width = np.sqrt(var) * np.sqrt(2.0 * (t * rho2 + 1.0) / (t * t * rho2)
                                   * np.log(np.sqrt(t * rho2 + 1.0) / alpha))
    width = np.where(t >= max(start, 2), width, np.inf)
    lower = np.where(np.isfinite(width), mean - width, -np.inf)
    upper = np.where(np.isfinite(width), mean + width, np.inf)
    return np.maximum.accumulate(lower), np.minimum.accumulate(upper)
