"""An INCONCLUSIVE verdict explained in one line: the open evidence, what would settle
it, and whether the host was too busy for the speed gate (from the speed spread)."""

from __future__ import annotations

from abgate.compare import compare_samples, decide, load_policy
from abgate.compare.explain import BUSY_SPREAD, speed_spread
from tests.support.compare import make_arm


def test_a_busy_host_is_named_from_the_speed_spread() -> None:
    # the same speed on average, but single items moved by ~30% (load bursts), on a
    # host whose measured load was elevated (abgate.host_load)
    a = make_arm(60, accuracy=0.5, noise=0.02, rng_seed=0)
    b = make_arm(60, accuracy=0.5, noise=0.30, rng_seed=1)
    comparison = compare_samples(a, b).with_extras(
        host_load={"elevated": True, "text": "load 5.0 above 2 cores"})
    assert speed_spread(comparison, "steady_decode_tps") > BUSY_SPREAD
    v = decide(comparison, load_policy(None))
    assert v.decision == "INCONCLUSIVE" and v.explanation is not None
    line = v.explanation
    assert "\n" not in line and line.startswith("INCONCLUSIVE at 60 items: speed ")
    assert "the host was busy (load 5.0 above 2 cores)" in line and "spread ±" in line
    assert v.to_json()["explanation"] == line


def test_a_steady_host_and_no_speedup_says_the_change_does_not_move_speed() -> None:
    a = make_arm(60, accuracy=0.5, noise=0.01, rng_seed=0)
    b = make_arm(60, accuracy=0.5, noise=0.01, rng_seed=1, tps=100.1)
    v = decide(compare_samples(a, b), load_policy(None))
    assert v.decision == "INCONCLUSIVE" and v.explanation is not None
    assert "sits inside the -2% to +2% band, on a steady host" in v.explanation
    assert "does not move this speed measurably here" in v.explanation
    assert "busy" not in v.explanation


def test_open_quality_gates_and_the_samples_that_would_settle_them_are_named() -> None:
    a = make_arm(40, seeds=2, correct_items=set(range(0, 24)), noise=0.01)
    b = make_arm(40, seeds=2, correct_items=set(range(2, 26)), noise=0.01, rng_seed=1,
                 tps=150.0)
    v = decide(compare_samples(a, b), load_policy(None))
    assert v.decision == "INCONCLUSIVE" and v.explanation is not None
    assert "accuracy could not yet show non-inferiority" in v.explanation
    assert f"about {v.more_samples_needed} more samples per arm" in v.explanation
    assert "speed" not in v.explanation  # the speed gate passed: not missing


def test_too_few_items_and_decided_verdicts() -> None:
    a = make_arm(10, noise=0.01)
    v = decide(compare_samples(a, make_arm(10, noise=0.01, rng_seed=1)), load_policy(None))
    assert v.explanation is not None and "only 10 items (the policy needs 30)" in v.explanation
    fast = make_arm(60, accuracy=0.5, noise=0.01, rng_seed=1, tps=150.0)
    accepted = decide(compare_samples(make_arm(60, accuracy=0.5, noise=0.01), fast),
                      load_policy(None))
    assert accepted.decision == "ACCEPT" and accepted.explanation is None
