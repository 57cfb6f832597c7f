"""The noise-aware speed part of ``abgate baseline check`` (pure; no engine)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abgate.compare.speed_check import compare_speed, ratio_interval, separated, spread
from tests.support.fuzz import FUZZ

# the case: 136.5 tok/s recorded, 115.8 at the check (15% slower), 10% tolerance


def test_noisy_runs_make_a_tolerance_sized_slowdown_inconclusive() -> None:
    # a busy 2-core host: the check's own repeats spread over ~30%
    check = compare_speed([136.5, 128.0, 141.0], [115.8, 139.0, 104.0], 0.10)
    assert check.outcome == "inconclusive" and check.ok
    assert check.ratio is not None and check.ratio < 0.9
    assert check.low is not None and check.high is not None and check.high >= 0.9
    assert check.current_spread is not None and check.current_spread > 0.10
    assert "too wide" in check.reason


def test_a_consistent_slowdown_beyond_the_noise_fails() -> None:
    check = compare_speed([136.5, 136.9, 136.1], [115.8, 116.1, 115.5], 0.10)
    assert check.outcome == "slower" and not check.ok
    assert check.high is not None and check.high < 0.9


def test_within_tolerance_is_ok_whatever_the_noise() -> None:
    assert compare_speed([100.0, 101.0, 99.0], [95.0, 60.0, 130.0], 0.10).outcome == "ok"
    assert compare_speed([100.0], [120.0], 0.10).outcome == "ok"


def test_a_large_slowdown_fails_even_when_noisy() -> None:
    check = compare_speed([13650.0, 12000.0, 15000.0], [115.8, 139.0, 104.0], 0.10)
    assert check.outcome == "slower"


def test_a_gross_slowdown_at_two_repeats_is_slower_whatever_the_interval() -> None:
    # the case: a loaded host makes the two current repeats 10x apart, so the
    # t-interval on about one degree of freedom spans zero to hundreds
    check = compare_speed([13650.0, 13400.0], [52.0, 530.0], 0.10)
    assert check.high is not None and check.high > 0.9  # the interval alone cannot tell
    assert check.outcome == "slower" and not check.ok
    assert "every current repeat" in check.reason and "whatever the" in check.reason
    # one recorded value (an old baseline's median) and two current repeats alike
    assert compare_speed([13650.0], [52.0, 530.0], 0.10).outcome == "slower"


def test_separation_must_exceed_the_tolerance_and_the_runs_own_spread() -> None:
    assert separated([100.0, 101.0], [80.0, 81.0], 0.9)  # spreads ~1%: 81 < 90 / 1.01
    assert not separated([100.0, 101.0], [80.0, 91.0], 0.9)  # overlaps the tolerance
    # apart by more than the tolerance, but not by more than the 20% either run spreads:
    # the interval decides (here: inconclusive), not the separation rule
    assert not separated([100.0, 120.0], [80.0, 89.0], 0.9)
    assert compare_speed([100.0, 120.0], [80.0, 89.0], 0.10).outcome == "inconclusive"
    # one recorded value and two noisy current ones, 27% slower on a loaded host
    assert compare_speed([31.84], [25.71, 21.0], 0.10).outcome == "inconclusive"
    assert not separated([], [1.0], 0.9) and not separated([1.0], [], 0.9)


def test_one_repeat_has_no_spread_and_the_ratio_decides() -> None:
    check = compare_speed([136.5], [115.8], 0.10)
    assert check.outcome == "slower" and check.low is None and "one repeat" in check.reason


def test_an_old_baseline_median_is_taken_as_exact() -> None:
    tight = compare_speed([136.5], [115.8, 116.0, 115.6], 0.10)
    assert tight.outcome == "slower"
    noisy = compare_speed([136.5], [115.8, 139.0, 104.0], 0.10)
    assert noisy.outcome == "inconclusive"


def test_unmeasured_and_tolerance_one() -> None:
    assert compare_speed([], [100.0], 0.10).outcome == "unmeasured"
    assert compare_speed([None], [100.0], 0.10).ok is False
    assert compare_speed([100.0], [None], 1.0).outcome == "ok"
    assert compare_speed([100.0, 100.0], [1.0, 1.0], 1.0).outcome == "ok"


def test_spread_and_interval_helpers() -> None:
    assert spread([100.0]) is None and spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert ratio_interval([100.0], [50.0]) is None
    low, high = ratio_interval([100.0, 100.0], [50.0, 50.0]) or (0, 0)
    assert low == pytest.approx(0.5) and high == pytest.approx(0.5)


speeds = st.lists(st.floats(min_value=1.0, max_value=1e4), min_size=1, max_size=6)


@FUZZ
@given(ref=speeds, cur=speeds, k=st.floats(min_value=0.01, max_value=100.0),
       tol=st.floats(min_value=0.0, max_value=1.0))
def test_units_do_not_matter(ref: list[float], cur: list[float], k: float, tol: float) -> None:
    """tok/s or tokens per ms: scaling both sides alike never changes the outcome."""
    a = compare_speed(ref, cur, tol)
    b = compare_speed([x * k for x in ref], [x * k for x in cur], tol)
    assert a.ratio == pytest.approx(b.ratio)
    noise = max((x for x in (spread(ref), spread(cur)) if x is not None), default=0.0)
    edge = max(cur) * (1 + noise) / min(ref) - (1 - tol)  # the separation rule's boundary
    if a.ratio is not None and abs(a.ratio - (1 - tol)) > 1e-9 and abs(edge) > 1e-9 \
            and (a.high is None or abs(a.high - (1 - tol)) > 1e-9):
        assert a.outcome == b.outcome


@FUZZ
@given(ref=speeds, cur=speeds, tol=st.floats(min_value=0.0, max_value=0.5))
def test_a_faster_build_never_fares_worse(ref: list[float], cur: list[float],
                                          tol: float) -> None:
    rank = {"ok": 0, "inconclusive": 1, "slower": 2, "unmeasured": 3}
    slow, fast = compare_speed(ref, cur, tol), compare_speed(ref, [x * 2 for x in cur], tol)
    assert rank[fast.outcome] <= rank[slow.outcome]


@FUZZ
@given(ref=speeds, cur=speeds, tol=st.floats(min_value=0.0, max_value=0.9))
def test_separated_ranges_are_always_slower(ref: list[float], cur: list[float],
                                            tol: float) -> None:
    """However few the repeats and however noisy each side, a current run whose every
    repeat is beyond the tolerance below every recorded one is ``slower``."""
    if separated(ref, cur, 1 - tol):
        assert compare_speed(ref, cur, tol).outcome == "slower"
