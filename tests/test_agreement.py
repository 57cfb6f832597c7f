"""Distribution agreement from fabricated teacher-forced rows: aggregation, clustered
intervals, percentiles, the largest-KL positions; and the interval primitives."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from abgate.compare.agreement import KL_CAP, summarize_agreement
from abgate.compare.agreement_rows import AgreementRow, agreement_row_of
from abgate.compare.stats import cluster_ratio, wilson_clustered, wilson_interval
from tests.support.agreement import aa_rows, agreement_row, broken_rows, rows_for


def test_identical_arms_agree_exactly() -> None:
    section = summarize_agreement(aa_rows(40, seeds=(0, 1)))
    assert section.measured is True
    assert section.method == "full" and section.approximate is False
    assert section.n_items == 40 and section.n_keys == 80 and section.n_tokens == 1600
    assert section.mean_kld.estimate == 0.0 and section.mean_kld.se == 0.0
    assert section.top1_agreement.estimate == 1.0
    assert section.top1_agreement.ci == (1.0, 1.0)
    assert section.zero_kl_fraction == 1.0
    assert section.histogram.below == 1600 and sum(section.histogram.counts) == 0
    assert section.delta_p.mean.estimate == 0.0
    assert section.kl_percentiles.max == 0.0
    json.dumps(section.to_json(), allow_nan=False)


def test_mean_is_token_weighted_like_llama_perplexity() -> None:
    rows = [agreement_row(0, n_tokens=10, kl=1.0), agreement_row(1, n_tokens=30, kl=0.0)]
    section = summarize_agreement(rows)
    assert section.mean_kld.estimate == pytest.approx(0.25)  # not the 0.5 of item means
    assert section.zero_kl_fraction == pytest.approx(0.75)


def test_clustered_se_is_the_ratio_estimator_and_ignores_repeated_seeds() -> None:
    def kl(i: int, p: int) -> float:
        return 0.1 * (1 + i % 4) * (1 + 0.3 * math.sin(p))

    lengths = {i: 10 + 3 * (i % 5) for i in range(12)}
    one = [agreement_row(i, 0, n_tokens=lengths[i], kl=kl) for i in range(12)]
    sums = [sum(kl(i, p) for p in range(lengths[i])) for i in range(12)]
    counts = [float(lengths[i]) for i in range(12)]
    ratio = sum(sums) / sum(counts)
    resid = [s - ratio * t for s, t in zip(sums, counts, strict=True)]
    expected_se = math.sqrt(12 / 11 * sum(r * r for r in resid)) / sum(counts)
    section = summarize_agreement(one)
    assert section.mean_kld.estimate == pytest.approx(ratio)
    assert section.mean_kld.se == pytest.approx(expected_se)
    t = stats.t.ppf(0.975, 11)
    assert section.mean_kld.ci == pytest.approx([ratio - t * expected_se,
                                                      ratio + t * expected_se])
    # The same outputs scored under a second seed are not new evidence: same SE.
    two = one + [agreement_row(i, 1, n_tokens=lengths[i], kl=kl) for i in range(12)]
    assert summarize_agreement(two).mean_kld.se == pytest.approx(expected_se)
    # A token-level (unclustered) SE would be far smaller here.
    flat = np.array([kl(i, p) for i in range(12) for p in range(lengths[i])])
    assert flat.std() / math.sqrt(flat.size) < expected_se / 2


def test_top1_agreement_interval_stays_inside_unit_interval() -> None:
    rows = rows_for(range(30), disagree=lambda i, p: i == 0 and p == 0)
    top1 = summarize_agreement(rows).top1_agreement
    assert top1.estimate == pytest.approx(1 - 1 / 600)
    assert 0.0 <= top1.ci[0] < top1.estimate and top1.ci[1] == 1.0


def test_broken_arm_is_far_from_the_baseline() -> None:
    section = summarize_agreement(broken_rows(40))
    assert section.mean_kld.estimate == pytest.approx(2.0, rel=0.1)
    assert section.mean_kld.ci[0] > 1.5
    assert section.top1_agreement.estimate == pytest.approx(1 / 3, abs=0.02)
    assert section.delta_p.mean.estimate == pytest.approx(0.1 - 0.8)
    assert section.delta_p.rms == pytest.approx(0.7)
    assert section.zero_kl_fraction == 0.0
    pct = section.kl_percentiles
    assert pct.median <= pct.p90 <= pct.p99 <= pct.p99_9 <= pct.max <= 3.0


def test_percentiles_and_histogram_of_known_values() -> None:
    values = [10.0 ** (-5 + 0.1 * p) for p in range(60)] + [0.0] * 20 + [500.0]
    row = agreement_row(0, n_tokens=len(values), kl=lambda i, p: values[p])
    section = summarize_agreement([row])
    pct = section.kl_percentiles
    assert pct.max == 500.0 and pct.median == pytest.approx(np.percentile(values, 50))
    hist = section.histogram
    assert hist.below == 20  # the exact zeros: below 1e-6
    assert hist.above == 1
    assert hist.below + hist.above + sum(hist.counts) == len(values)
    assert len(hist.edges) == len(hist.counts) + 1


def test_largest_positions_carry_both_arms_top_tokens() -> None:
    rows = aa_rows(5)
    rows[3] = agreement_row(3, kl=lambda i, p: 4.0 if p == 7 else 0.01,
                            disagree=lambda i, p: p == 7, p_cand=0.2)
    section = summarize_agreement(rows)
    top = section.largest_positions[0]
    assert (top.key, top.position, top.kl) == ("item-0003#0", 7, 4.0)
    assert top.token == rows[3]["tokens"][7]
    assert top.top1_cand == top.token + 1 != top.top1_base
    assert top.top_base[0][0] == top.token and len(top.top_base) == 5
    assert top.top_cand[0][1] == pytest.approx(math.log(0.2))
    assert top.delta_p == pytest.approx(0.2 - 0.8)
    assert section.largest_items[0].item_id == "item-0003"
    kls = [p.kl for p in section.largest_positions]
    assert kls == sorted(kls, reverse=True)


def test_top_k_method_is_labelled_approximate() -> None:
    section = summarize_agreement(rows_for(range(5), method="top_k", k=20, kl=0.01))
    assert section.approximate is True
    assert (section.method, section.k) == ("top_k", 20)
    mixed = summarize_agreement(rows_for(range(2), method="top_k", k=20)
                                + rows_for(range(2, 4)))
    assert mixed.method == "mixed" and mixed.approximate is True


def test_non_finite_kl_is_capped_and_counted() -> None:
    row = agreement_row(0, n_tokens=4, kl=0.0)
    row["kl"] = [0.0, float("inf"), float("nan"), -1e-9]
    section = summarize_agreement([row, agreement_row(1, n_tokens=4)])
    assert section.n_nonfinite_kl == 2 and section.n_negative_kl == 1
    assert section.kl_percentiles.max == KL_CAP
    assert section.mean_kld.estimate == pytest.approx(2 * KL_CAP / 8)


def test_bad_duplicate_and_empty_rows_are_counted_not_fatal() -> None:
    bad = agreement_row(1)
    bad["kl"] = bad["kl"][:-1]
    odd = agreement_row(2)
    odd["method"] = "sampled"
    section = summarize_agreement([agreement_row(0), bad, odd, agreement_row(0),
                                   agreement_row(3, n_tokens=0), "junk"])  # type: ignore[list-item]
    assert section.measured is True and section.n_keys == 1
    assert (section.n_skipped, section.n_duplicate_keys, section.n_empty) == (3, 1, 1)
    assert "'kl' has 19 values for 20 tokens" in section.problems[0]


def test_no_usable_rows_is_not_measured_with_the_reason() -> None:
    bad = agreement_row(0)
    del bad["top1_cand"]
    section = summarize_agreement([bad])
    assert section.measured is False
    assert "no usable agreement rows" in section.reason
    assert "'top1_cand'" in section.reason
    assert summarize_agreement([]).measured is False


def test_summary_is_deterministic() -> None:
    rows = broken_rows(12, seeds=(0, 1))
    assert summarize_agreement(rows) == summarize_agreement(list(rows))


def test_cluster_ratio_edge_cases() -> None:
    assert all(math.isnan(v) for v in cluster_ratio([], []))
    ratio, se = cluster_ratio([3.0], [6.0])
    assert ratio == 0.5 and math.isnan(se)
    with pytest.raises(ValueError):
        cluster_ratio([1.0], [1.0, 2.0])


@pytest.mark.parametrize("p", [0.0, 0.001, 0.025, 0.5, 0.975, 1.0])
@pytest.mark.parametrize("n", [1.0, 5.0, 40.0, 1000.0])
def test_wilson_interval_stays_inside_zero_one(p: float, n: float) -> None:
    low, high = wilson_interval(p, n, 1.96)
    assert 0.0 <= low <= p <= high <= 1.0


def test_wilson_at_zero_successes_has_a_real_upper_bound() -> None:
    low, high = wilson_interval(0.0, 40, 1.96)
    assert low == 0.0 and high == pytest.approx(1.96**2 / (40 + 1.96**2))


def test_clustered_wilson_uses_the_design_effect() -> None:
    # SE twice the binomial one -> a quarter of the samples are effective.
    p, n = 0.3, 400
    se = 2 * math.sqrt(p * (1 - p) / n)
    _, _, n_eff = wilson_clustered(p, se, n, 100, 1.96)
    assert n_eff == pytest.approx(n / 4)
    assert wilson_clustered(0.0, 0.0, 80, 40, 1.96)[2] == 40


def test_agreement_row_model_round_trips_a_line_and_reads_old_rows_leniently() -> None:
    """A row as written is the model's JSON, key for key and value for value; a
    damaged row reads with the bad field missing, so the analysis names it."""
    line = json.dumps(agreement_row(3, method="top_k", k=20))
    row = agreement_row_of(json.loads(line))
    assert json.dumps(row.model_dump(mode="json")) == line
    assert row.problem() is None and row.row_key == "item-0003#0"
    old = agreement_row(4)
    del old["key"]
    old["tokens"] = "not a list"
    old["kl"] = ["x"] + old["kl"][1:]
    parsed = agreement_row_of(old)
    assert parsed.row_key == "item-0004#0" and parsed.kl is not None and parsed.kl[0] is None
    assert parsed.problem() == "'tokens' is not a list"
    with pytest.raises(ValidationError):
        AgreementRow(key="k", tokens=["a"])  # the writer's types are checked
