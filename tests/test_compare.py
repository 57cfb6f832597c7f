"""Paired statistics of two arms: abgate.compare.compare_samples and its primitives."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from abgate.compare import compare_samples
from abgate.compare.mde import items_needed, mde
from abgate.compare.stats import (
    cluster_bootstrap,
    clustered_mean,
    item_means,
    mcnemar_exact,
    student_t_interval,
    z_two_sided,
)
from abgate.errors import AbgateError
from abgate.scoring.health import clustered_accuracy
from tests.support.compare import make_arm, make_sample


def test_result_is_json_without_nan() -> None:
    result = compare_samples(make_arm(30, noise=0.05), make_arm(30, noise=0.05, rng_seed=1))
    text = json.dumps(result.to_json(), allow_nan=False)
    assert set(json.loads(text)) >= {"n_pairs", "n_excluded_errors", "quality", "speed",
                                     "diagnostics", "mde", "bootstrap"}
    assert result.bootstrap.to_json() == {"seed": 0, "n_boot": 2000, "confidence": 0.95,
                                   "method": "percentile; items resampled with replacement"}


def test_accuracy_per_arm_and_paired_difference() -> None:
    a = make_arm(100, accuracy=0.6)
    b = make_arm(100, accuracy=0.2)
    acc = compare_samples(a, b).quality.accuracy
    assert acc.a.estimate == pytest.approx(0.6)
    assert acc.b.estimate == pytest.approx(0.2)
    assert acc.diff.estimate == pytest.approx(-0.4)
    assert acc.mcnemar.to_json() == {"a_only_correct": 40, "b_only_correct": 0, "n_discordant": 40,
                              "p_value": pytest.approx(2 * 0.5**40)}
    # 40 pairs at d = -1 and 60 at d = 0, one pair per item: SE = sd(d)/sqrt(n).
    d = np.array([-1.0] * 40 + [0.0] * 60)
    assert acc.diff.se == pytest.approx(d.std() / math.sqrt(100))
    low, high = acc.diff.ci
    assert low < -0.4 < high < 0


@pytest.mark.parametrize(("a_only", "b_only"), [(0, 0), (1, 0), (7, 3), (3, 7), (20, 41)])
def test_mcnemar_exact_matches_scipy_binomtest(a_only: int, b_only: int) -> None:
    n = a_only + b_only
    expected = 1.0 if n == 0 else stats.binomtest(a_only, n, 0.5).pvalue
    assert mcnemar_exact(a_only, b_only) == pytest.approx(expected)


def test_mcnemar_counts_discordant_item_seed_pairs() -> None:
    a = make_arm(20, seeds=2, correct_items={0, 1, 2, 3, 4, 5})
    b = make_arm(20, seeds=2, correct_items={2, 3, 4, 5, 6})
    mc = compare_samples(a, b).quality.accuracy.mcnemar
    assert (mc.a_only_correct, mc.b_only_correct) == (4, 2)
    assert mc.p_value == pytest.approx(stats.binomtest(4, 6, 0.5).pvalue)


def test_clustered_se_does_not_shrink_with_repeated_seeds() -> None:
    one = compare_samples(make_arm(50, accuracy=0.6), make_arm(50, accuracy=0.3))
    five = compare_samples(make_arm(50, accuracy=0.6, seeds=5),
                           make_arm(50, accuracy=0.3, seeds=5))
    for name in ("a", "diff"):
        assert getattr(five.quality.accuracy, name).se == pytest.approx(
            getattr(one.quality.accuracy, name).se)


def test_clustered_mean_agrees_with_clustered_accuracy() -> None:
    rng = np.random.default_rng(3)
    outcomes = list(rng.random(60) < 0.4)
    clusters = [f"i{k // 3}" for k in range(60)]
    assert clustered_mean([float(x) for x in outcomes], clusters) == pytest.approx(
        clustered_accuracy(outcomes, clusters))
    assert math.isnan(clustered_mean([1.0, 0.0], ["a", "a"])[1])


def test_speed_log_ratio_is_averaged_per_item_then_across_items() -> None:
    # Item 0 has two seeds at ratios 2 and 1 (mean log = log 2 / 2); item 1 ratio 1.
    a = [make_sample(0, 0, tps=100.0), make_sample(0, 1, tps=100.0), make_sample(1, 0)]
    b = [make_sample(0, 0, tps=200.0), make_sample(0, 1, tps=100.0), make_sample(1, 0)]
    speed = compare_samples(a, b, n_boot=50).speed["steady_decode_tps"]
    assert speed.log_ratio.estimate == pytest.approx(math.log(2.0) / 4)
    assert speed.n_pairs == 3 and speed.n_items == 2
    assert speed.a.to_json() == {"mean": 100.0, "median": 100.0}
    assert speed.b.mean == pytest.approx(400.0 / 3)
    assert speed.pct_change_mean == pytest.approx(1.0 / 3)


def test_ttft_and_prefill_are_compared_too() -> None:
    a = make_arm(40, noise=0.02, ttft=0.2, prefill=500.0)
    b = make_arm(40, noise=0.02, rng_seed=1, ttft=0.1, prefill=1000.0)
    speed = compare_samples(a, b).speed
    assert speed["ttft_s"].ratio.estimate == pytest.approx(0.5)
    assert speed["ttft_s"].higher_is_better is False
    assert speed["prefill_tps"].pct_change_mean == pytest.approx(1.0)


def test_bootstrap_is_reproducible_and_seeded() -> None:
    a = make_arm(40, noise=0.1, rng_seed=1)
    b = make_arm(40, noise=0.1, rng_seed=2)
    first = compare_samples(a, b, seed=7).speed["steady_decode_tps"].log_ratio
    again = compare_samples(a, b, seed=7).speed["steady_decode_tps"].log_ratio
    other = compare_samples(a, b, seed=8).speed["steady_decode_tps"].log_ratio
    assert first == again
    assert first.estimate == other.estimate
    assert first.ci_bootstrap != other.ci_bootstrap
    assert first.ci_t == other.ci_t
    assert compare_samples(a, b, seed=8, n_boot=500).bootstrap.n_boot == 500


def test_cluster_bootstrap_percentile_interval() -> None:
    values = np.random.default_rng(0).normal(0.1, 0.2, size=200)
    result = cluster_bootstrap(values, seed=0, n_boot=4000, confidence=0.95)
    se = values.std(ddof=1) / math.sqrt(values.size)
    assert result.se == pytest.approx(se, rel=0.1)
    assert result.low == pytest.approx(values.mean() - 1.96 * se, abs=0.01)
    assert result.high == pytest.approx(values.mean() + 1.96 * se, abs=0.01)
    single = cluster_bootstrap(np.array([0.3]), seed=0, n_boot=10, confidence=0.9)
    assert single.estimate == 0.3 and math.isnan(single.low)


def test_student_t_interval_matches_scipy() -> None:
    values = np.random.default_rng(1).normal(size=25)
    low, high, se = student_t_interval(values, 0.9)
    expected = stats.t.interval(0.9, 24, loc=values.mean(), scale=stats.sem(values))
    assert (low, high) == pytest.approx(expected)
    assert se == pytest.approx(stats.sem(values))


def test_speed_interval_is_the_wider_of_bootstrap_and_t() -> None:
    # Three same-direction outliers among 30 quiet pairs: the percentile bootstrap
    # clears 0, the t interval (rightly: three coin flips) does not.
    a = make_arm(30, noise=0.0)
    b = make_arm(30, noise=0.0)
    for i, tps in ((0, 160.0), (1, 170.0), (2, 150.0)):
        b[i] = make_sample(i, tps=tps)
    log_ratio = compare_samples(a, b).speed["steady_decode_tps"].log_ratio
    assert log_ratio.ci_bootstrap[0] >= 0.0
    assert log_ratio.ci_t[0] < 0.0
    assert log_ratio.ci == (min(log_ratio.ci_bootstrap[0], log_ratio.ci_t[0]),
                               max(log_ratio.ci_bootstrap[1], log_ratio.ci_t[1]))


def test_item_means() -> None:
    labels, means = item_means([1.0, 3.0, 5.0], ["b", "b", "a"])
    assert labels == ["a", "b"] and list(means) == [5.0, 2.0]


def test_mismatched_keys_raise_naming_keys() -> None:
    a = make_arm(10)
    b = make_arm(12)[2:]
    with pytest.raises(AbgateError, match=r"2 only in A \('item-0000#0', 'item-0001#0'\)"):
        compare_samples(a, b)
    with pytest.raises(AbgateError, match=r"2 only in B"):
        compare_samples(make_arm(10), make_arm(12))
    allowed = compare_samples(a, b, allow_unmatched=True, n_boot=20)
    assert allowed.n_unmatched.to_json() == {"a": 2, "b": 2}
    assert allowed.n_pairs == 8


def test_duplicate_keys_and_empty_arms_raise() -> None:
    with pytest.raises(AbgateError, match="more than once"):
        compare_samples(make_arm(3) + make_arm(1), make_arm(3))
    with pytest.raises(AbgateError, match="no matched"):
        compare_samples([], [])


def test_warmup_samples_are_ignored() -> None:
    a = [make_sample(99, warmup=True), *make_arm(5)]
    result = compare_samples(a, make_arm(5), n_boot=20)
    assert result.n_pairs == 5


def test_error_samples_are_excluded_and_counted() -> None:
    a = make_arm(40, accuracy=0.5)
    b = make_arm(40, accuracy=0.5)
    b[0] = make_sample(0, finish="error")  # item 0 was correct in A
    a[39] = make_sample(39, finish="error")
    result = compare_samples(a, b)
    assert result.n_pairs == 40
    assert result.n_excluded_errors == 2
    acc = result.quality.accuracy
    assert acc.n_scored == 38
    assert acc.mcnemar.n_discordant == 0  # the error is not a wrong answer
    assert result.quality.rates.error.a == pytest.approx(1 / 40)
    assert result.quality.rates.error.diff.estimate == 0.0
    assert result.speed["steady_decode_tps"].n_pairs == 38


def test_health_rate_deltas() -> None:
    a = make_arm(50)
    b = (make_arm(10, finish="length", invalid=True, rep=0.5)
         + make_arm(50)[10:])
    rates = compare_samples(a, b, n_boot=20).quality.rates
    assert rates.truncated.diff.estimate == pytest.approx(0.2)
    assert rates.invalid.diff.estimate == pytest.approx(0.2)
    assert rates.natural_stop.diff.estimate == pytest.approx(-0.2)
    assert rates.seq_rep_4.diff.estimate == pytest.approx(0.2 * 0.45)


def test_diagnostics_identity_lengths_and_largest_changes() -> None:
    a = make_arm(12)
    b = make_arm(12)
    b[3] = make_sample(3, tokens=130, rep=0.507, correct=True)
    b[5] = make_sample(5, token_ids=[1, 2, 3], correct=False)
    diag = compare_samples(a, b, n_boot=20).diagnostics
    assert diag.identical_outputs.text == "10/12"
    assert diag.output_tokens.mean_abs_diff == pytest.approx((80 + 47) / 12)
    top = diag.largest_length_changes[0]
    assert top.key == "item-0003#0"
    assert top.text == "item-0003#0: 50 tokens / rep 0.050 -> 130 / 0.507, still correct"
    assert diag.largest_repetition_changes[0].key == "item-0003#0"
    assert diag.largest_length_changes[1].text.endswith("became wrong")


def test_mde_reported_and_formula() -> None:
    result = compare_samples(make_arm(100, accuracy=0.5, noise=0.05),
                             make_arm(100, accuracy=0.5, noise=0.05, rng_seed=1))
    section = result.mde
    se = result.speed["steady_decode_tps"].log_ratio.se
    expected = math.exp((z_two_sided(0.95) + stats.norm.ppf(0.8)) * se) - 1
    assert section.speed["steady_decode_tps"] == pytest.approx(expected)
    # Identical outputs: the paired MDE is 0, the unpaired one and the discordance bound
    # say what 100 items could not exclude.
    assert section.accuracy_paired == 0.0
    assert section.accuracy_unpaired == pytest.approx(2.8 * math.hypot(0.05, 0.05), rel=0.01)
    assert section.discordance_upper == pytest.approx(1 - 0.025 ** (1 / 100))


def test_items_needed_inverts_mde() -> None:
    z = z_two_sided(0.95)
    needed = items_needed(0.01, 100, 0.01, z, 0.8)
    assert needed is not None
    # At the needed n the MDE has shrunk to (at most) the distance asked for.
    assert mde(0.01 * math.sqrt(100 / needed), z, 0.8) <= 0.01
    assert mde(0.01 * math.sqrt(100 / (needed - 1)), z, 0.8) > 0.01
    assert items_needed(0.01, 100, 0.0, z, 0.8) is None
    assert items_needed(0.0, 100, 0.01, z, 0.8) == 100


@pytest.mark.parametrize("kwargs", [{"n_boot": 1}, {"confidence": 1.0}, {"seed": -1},
                                    {"power": 0.0}])
def test_bad_arguments(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        compare_samples(make_arm(3), make_arm(3), **kwargs)  # type: ignore[arg-type]


arm_spec = st.lists(
    st.tuples(st.booleans(), st.booleans(), st.floats(10, 1000), st.floats(10, 1000)),
    min_size=2, max_size=30)


@settings(max_examples=40, deadline=None)
@given(arm_spec, st.integers(1, 3), st.integers(0, 2**16))
def test_swapping_arms_negates_differences(spec: list[tuple[bool, bool, float, float]],
                                           seeds: int, seed: int) -> None:
    a = [make_sample(i, s, correct=ca, tps=ta) for i, (ca, _, ta, _) in enumerate(spec)
         for s in range(seeds)]
    b = [make_sample(i, s, correct=cb, tps=tb) for i, (_, cb, _, tb) in enumerate(spec)
         for s in range(seeds)]
    ab = compare_samples(a, b, seed=seed, n_boot=200)
    ba = compare_samples(b, a, seed=seed, n_boot=200)
    d_ab, d_ba = ab.quality.accuracy.diff, ba.quality.accuracy.diff
    assert d_ba.estimate == pytest.approx(-d_ab.estimate, abs=1e-12)
    assert d_ba.se == pytest.approx(d_ab.se, abs=1e-12)
    mc_ab, mc_ba = ab.quality.accuracy.mcnemar, ba.quality.accuracy.mcnemar
    assert mc_ab.p_value == pytest.approx(mc_ba.p_value)
    r_ab = ab.speed["steady_decode_tps"].ratio
    r_ba = ba.speed["steady_decode_tps"].ratio
    assert r_ba.estimate == pytest.approx(1.0 / r_ab.estimate)
    assert r_ba.ci[0] == pytest.approx(1.0 / r_ab.ci[1])
    assert r_ba.ci[1] == pytest.approx(1.0 / r_ab.ci[0])


def test_speed_drift_flags_an_arm_whose_machine_slowed_down() -> None:
    a = make_arm(40)
    b = [make_sample(i, tps=100.0 if i < 20 else 50.0) for i in range(40)]
    drift = compare_samples(a, b, n_boot=20).diagnostics.speed_drift
    assert drift.a == 0.0
    assert drift.b == pytest.approx(-0.5)
