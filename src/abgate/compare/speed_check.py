"""A noise-aware speed comparison of one build against its recorded baseline.

Each side is a set of per-repeat decode speeds (tok/s) of the same greedy case. The
point estimate is the ratio of medians (current / recorded); its interval is a Welch
t-interval on the difference of mean log speeds (the ratio of geometric means), so
it widens with the spread the two runs themselves showed and with few repeats. With
``floor = 1 - tolerance``:

- ``ok``: the ratio is at or above the floor;
- ``slower``: every current repeat is below ``floor`` times the slowest recorded one,
  by more than the largest spread either run showed (:func:`separated`: the two runs'
  ranges are apart beyond the tolerance and their own noise; no interval is needed,
  and none at tiny n can overrule it), or the whole interval is below the floor: a
  slowdown beyond the tolerance that the runs' own noise cannot explain (the check
  fails);
- ``inconclusive``: the ratio is below the floor but the interval reaches above it:
  the runs are too noisy to tell a tolerance-sized slowdown from noise (not a failure;
  more ``--repeats`` or a quieter host narrow the interval);
- ``unmeasured``: a side has no decode speed (fails unless the tolerance is 1).

With a single repeat on the current side there is no spread to judge the noise by,
and the ratio alone decides (``slower`` below the floor), as before. The separation rule
matters at tiny n: two repeats give a t-interval on one degree of freedom (t = 12.7),
so on a loaded host a 96% slowdown could read 0.000-557 and, without the rule, pass
as inconclusive. A recorded side
with one value (or a baseline recorded before per-repeat values were kept: its median)
is taken as exact. The interval covers the noise within each run, not a change of
the host between them (another job starting): the runs' spreads and the hosts' load
averages are reported next to it for that judgement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from abgate.compare.stats import t_quantile

OUTCOMES = ("ok", "slower", "inconclusive", "unmeasured")


@dataclass(frozen=True)
class SpeedCheck:
    outcome: str
    ratio: float | None  # median(current) / median(recorded)
    low: float | None  # the ratio's interval (geometric means), None with one repeat
    high: float | None
    recorded_spread: float | None  # (max - min) / median of each side's repeats
    current_spread: float | None
    reason: str

    @property
    def ok(self) -> bool:
        """Whether the speed part of the check passes (inconclusive is not a failure)."""
        return self.outcome in ("ok", "inconclusive")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _clean(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def spread(values: Sequence[float]) -> float | None:
    """The relative range of repeats, ``(max - min) / median``; None below two."""
    if len(values) < 2:
        return None
    return float((max(values) - min(values)) / np.median(values))


def separated(recorded: Sequence[float], current: Sequence[float], floor: float) -> bool:
    """Whether the fastest current repeat is below ``floor`` times the slowest recorded
    one, with that gap also wider than the largest spread either run showed within
    itself (``max / min <= floor / (1 + spread)``): the runs' ranges are apart by more
    than the tolerance and their own noise, however few the repeats."""
    if not recorded or not current:
        return False
    noise = max((s for s in (spread(recorded), spread(current)) if s is not None), default=0.0)
    return bool(max(current) * (1.0 + noise) < floor * min(recorded))


def ratio_interval(recorded: Sequence[float], current: Sequence[float],
                   confidence: float = 0.95) -> tuple[float, float] | None:
    """The Welch interval of ``exp(mean log current - mean log recorded)``; None when
    the current side has fewer than two values."""
    cur, ref = np.log(np.asarray(current)), np.log(np.asarray(recorded))
    if cur.size < 2:
        return None
    v_cur = float(cur.var(ddof=1)) / cur.size
    v_ref = float(ref.var(ddof=1)) / ref.size if ref.size >= 2 else 0.0
    se = math.sqrt(v_cur + v_ref)
    diff = float(cur.mean() - ref.mean())
    if se == 0.0:
        return math.exp(diff), math.exp(diff)
    # Welch-Satterthwaite degrees of freedom (the current side's alone when the
    # recorded side is a single, exact value)
    df_den = v_cur ** 2 / (cur.size - 1) + (v_ref ** 2 / (ref.size - 1) if ref.size >= 2
                                            else 0.0)
    df = max(1, int((v_cur + v_ref) ** 2 / df_den)) if df_den > 0 else cur.size - 1
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return math.exp(diff - half), math.exp(diff + half)


def compare_speed(recorded: Sequence[float | None], current: Sequence[float | None],
                  tolerance: float, confidence: float = 0.95) -> SpeedCheck:
    """Decide ``ok`` / ``slower`` / ``inconclusive`` / ``unmeasured`` (module doc)."""
    ref, cur = _clean(recorded), _clean(current)
    s_ref, s_cur = spread(ref), spread(cur)
    floor = 1.0 - tolerance
    if not ref or not cur:
        outcome = "ok" if tolerance >= 1.0 else "unmeasured"
        return SpeedCheck(outcome, None, None, None, s_ref, s_cur,
                          "no decode speed measured on " + ("either side" if not ref and not cur
                                                            else "one side"))
    ratio = float(np.median(cur) / np.median(ref))
    interval = ratio_interval(ref, cur, confidence)
    low, high = interval if interval else (None, None)
    pct = f"{(1 - ratio) * 100:.1f}% slower" if ratio < 1 else f"{(ratio - 1) * 100:.1f}% faster"
    if ratio >= floor:
        return SpeedCheck("ok", ratio, low, high, s_ref, s_cur,
                          f"{pct}; within the {tolerance:.0%} tolerance")
    if high is None:
        return SpeedCheck("slower", ratio, None, None, s_ref, s_cur,
                          f"{pct}, beyond the {tolerance:.0%} tolerance (one repeat: no "
                          "spread to judge the noise by)")
    interval_text = f"{confidence:.0%} interval {low:.3f}-{high:.3f}"
    if separated(ref, cur, floor):
        return SpeedCheck("slower", ratio, low, high, s_ref, s_cur,
                          f"{pct}; every current repeat (fastest {max(cur):.4g}) is below "
                          f"{floor:.2f} x the slowest recorded one ({min(ref):.4g}), by more "
                          f"than the runs' own spread: beyond the {tolerance:.0%} tolerance "
                          f"whatever the {interval_text}")
    if high < floor:
        return SpeedCheck("slower", ratio, low, high, s_ref, s_cur,
                          f"{pct}; the {interval_text} is below {floor:.2f}: beyond the "
                          f"{tolerance:.0%} tolerance and the runs' own noise")
    noise = max(s for s in (s_ref, s_cur) if s is not None)
    return SpeedCheck("inconclusive", ratio, low, high, s_ref, s_cur,
                      f"{pct} but the {interval_text} reaches {floor:.2f}: the runs' own "
                      f"spread (up to {noise:.0%}) is too wide to resolve a "
                      f"{tolerance:.0%} slowdown; more --repeats or a quieter host")
