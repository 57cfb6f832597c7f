"""Output-health metrics: seq-rep-n, per-sample flags, clustered SE, outliers, aggregation."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abgate.records.samples import Sample, SampleHealthRecord
from abgate.scoring.extract import Extraction, extract_integer
from abgate.scoring.health import (
    aggregate_health,
    clustered_accuracy,
    count_control_chars,
    find_outliers,
    sample_health,
    seq_rep_n,
)

# Property tests are judged on results, not speed: a loaded machine must not fail them.
no_deadline = settings(deadline=None)

# ---------------------------------------------------------------- seq-rep-n


def test_seq_rep_known_values() -> None:
    assert seq_rep_n([1, 2, 3, 4]) == 0.0
    assert seq_rep_n([7] * 5) == 0.5  # two 4-grams, one distinct
    assert seq_rep_n(list("abcdabcd")) == pytest.approx(1 - 4 / 5)
    assert seq_rep_n([1, 2, 3]) == 0.0  # fewer than n tokens
    assert seq_rep_n([]) == 0.0
    assert seq_rep_n([1, 1, 2], n=2) == 0.0
    assert seq_rep_n([1, 1, 1], n=2) == 0.5
    with pytest.raises(ValueError):
        seq_rep_n([1, 2], n=0)


@no_deadline
@given(st.lists(st.integers(min_value=0, max_value=5), max_size=60), st.integers(1, 6))
def test_seq_rep_matches_definition(tokens: list[int], n: int) -> None:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    expected = 1 - len(set(grams)) / len(grams) if grams else 0.0
    got = seq_rep_n(tokens, n)
    assert got == pytest.approx(expected)
    assert 0.0 <= got < 1.0
    assert (got == 0.0) == (len(set(grams)) == len(grams))


@no_deadline
@given(st.integers(min_value=4, max_value=30), st.integers(min_value=2, max_value=20))
def test_seq_rep_of_a_loop(length: int, repeats: int) -> None:
    """A loop of ``length`` distinct tokens has exactly ``length`` distinct 4-grams."""
    tokens = list(range(length)) * repeats
    assert seq_rep_n(tokens) == pytest.approx(1 - length / (length * repeats - 3))


# ---------------------------------------------------------------- per sample


def _health(text: str, finish: str = "stop", reference: int | None = 42, **kw: Any) -> Any:
    return sample_health(
        text=text,
        token_ids=kw.get("token_ids"),
        output_tokens=kw.get("output_tokens", len(text.split())),
        finish_reason=finish,
        extraction=extract_integer(text),
        reference=reference,
    )


def test_sample_health_flags() -> None:
    right = _health("The answer is 42.")
    assert (right.correct, right.invalid, right.natural_stop, right.truncated) == (
        True,
        False,
        True,
        False,
    )
    wrong = _health("The answer is 41.")
    assert wrong.correct is False and not wrong.invalid
    invalid = _health("The answer is 41.5", finish="length")
    assert invalid.correct is False and invalid.invalid
    assert invalid.invalid_reason == "non_integral"
    assert invalid.truncated and not invalid.natural_stop
    unscored = _health("The answer is 42.", reference=None)
    assert unscored.correct is None


def test_error_samples_are_never_wrong_answers() -> None:
    err = _health("", finish="error")
    assert err.error and err.correct is None
    assert not err.invalid and err.invalid_reason is None
    assert not err.truncated and not err.natural_stop


def test_empty_and_bad_characters() -> None:
    assert _health("  \n\t ").empty
    assert not _health("0").empty
    bad = _health("a\ufffd\ufffdb\x00c\x07\x1b\x7f\x85 ok\t\n\r")
    assert bad.replacement_chars == 2
    assert bad.control_chars == 5  # NUL, BEL, ESC, DEL, NEL; tab/newline/CR are fine
    assert bad.nul_chars == 1
    assert count_control_chars("plain text\n") == 0


def test_counts_keep_replacement_nul_and_other_controls_apart() -> None:
    rows = [Sample(item_id="a", seed=0, health=_health(text)) for text in
            ("a\ufffd\x00\x00 The answer is 42.", "The answer is 42.\x07", "no answer")]
    counts = aggregate_health(rows).counts
    assert counts is not None
    assert counts.replacement_chars == 1 and counts.n_with_replacement_chars == 1
    assert counts.nul_chars == 2 and counts.n_with_nul_chars == 1
    assert counts.other_control_chars == 1  # the BEL; the NULs are counted apart
    assert (counts.n_correct, counts.n_scored, counts.n_invalid) == (2, 3, 1)
    old = [Sample(item_id="a", seed=0, health=SampleHealthRecord.model_validate(
        {k: v for k, v in row.health.to_dict().items() if k != "nul_chars"})) for row in rows]
    old_counts = aggregate_health(old).counts
    assert old_counts is not None and old_counts.nul_chars is None


def test_repetition_prefers_token_ids() -> None:
    text = "one two three four five six"
    by_ids = _health(text, token_ids=[5] * 10, output_tokens=10)
    assert by_ids.seq_rep_4 == pytest.approx(1 - 1 / 7)
    assert by_ids.seq_rep_4_words == 0.0
    by_words = _health("go on " * 10)
    assert by_words.seq_rep_4 == by_words.seq_rep_4_words == pytest.approx(1 - 2 / 17)
    assert set(by_ids.to_dict()) >= {"correct", "seq_rep_4", "output_tokens", "error"}


# ---------------------------------------------------------------- clustered SE


def _miller_var(correct: list[bool], clusters: list[str]) -> float:
    """Miller (2024): SE_CLT^2 plus within-cluster cross terms, written out literally (the
    squared SE: where the true SE is 0, both sides round to ~1e-17 of variance, which a
    square root would blow up to ~1e-9 and a negative one would not take)."""
    n = len(correct)
    s = [float(c) for c in correct]
    mean = sum(s) / n
    clt = sum((x - mean) ** 2 for x in s) / n**2
    cross = sum(
        (s[i] - mean) * (s[j] - mean)
        for i in range(n)
        for j in range(n)
        if i != j and clusters[i] == clusters[j]
    )
    return clt + cross / n**2


@no_deadline
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), min_size=1, max_size=40))
def test_clustered_se_matches_miller(samples: list[tuple[bool, int]]) -> None:
    correct = [c for c, _ in samples]
    clusters = [f"item-{k}" for _, k in samples]
    mean, se = clustered_accuracy(correct, clusters)
    assert mean == pytest.approx(sum(correct) / len(correct))
    if len(set(clusters)) < 2:
        assert math.isnan(se)
    else:
        assert se**2 == pytest.approx(_miller_var(correct, clusters), abs=1e-15)


def test_one_sample_per_item_is_the_binomial_se() -> None:
    correct = [True] * 30 + [False] * 70
    mean, se = clustered_accuracy(correct, [str(i) for i in range(100)])
    assert mean == 0.3
    assert se == pytest.approx(math.sqrt(0.3 * 0.7 / 100))


def test_identical_seeds_add_no_information() -> None:
    items = [True, False, True, True, False, False, True, False, True, True]
    _, se_once = clustered_accuracy(items, [str(i) for i in range(10)])
    seeds = 5
    repeated = [c for c in items for _ in range(seeds)]
    clusters = [str(i) for i in range(10) for _ in range(seeds)]
    _, se_clustered = clustered_accuracy(repeated, clusters)
    _, se_naive = clustered_accuracy(repeated, [str(i) for i in range(len(repeated))])
    assert se_clustered == pytest.approx(se_once)
    assert se_naive == pytest.approx(se_once / math.sqrt(seeds))  # what ignoring clusters claims


def test_clustered_accuracy_edges() -> None:
    mean, se = clustered_accuracy([], [])
    assert math.isnan(mean) and math.isnan(se)
    mean, se = clustered_accuracy([True, False], ["a", "a"])
    assert mean == 0.5 and math.isnan(se)
    with pytest.raises(ValueError):
        clustered_accuracy([True], ["a", "b"])


# ---------------------------------------------------------------- outliers + aggregate


def _row(item: int, seed: int, tokens: int, rep: float, correct: bool | None,
         **kw: Any) -> Sample:
    return Sample(item_id=f"gsm8k-{item}", seed=seed, health=SampleHealthRecord(
        output_tokens=tokens, seq_rep_4=rep, correct=correct, **kw))


def test_outliers_flag_long_and_repetitive_samples() -> None:
    rows = [_row(i, 0, 100 + i, 0.02, True) for i in range(20)]
    rows.append(_row(99, 1, 1400, 0.61, True))  # correct but long and looping
    rows.append(_row(98, 0, 120, 0.55, False))  # short but repetitive
    rows.append(_row(97, 0, 5000, 0.9, None, error=True))  # errors are not outliers
    found = find_outliers(rows)
    assert [(o.item_id, o.seed) for o in found] == [("gsm8k-99", 1), ("gsm8k-98", 0)]
    top = found[0]
    assert top.correct is True and top.output_tokens == 1400
    assert "1400 tokens" in top.why and "seq-rep-4 0.61" in top.why
    assert "tokens" not in found[1].why
    assert find_outliers([]) == []


def test_outlier_needs_absolute_excess() -> None:
    rows = [_row(i, 0, 3, 0.0, True) for i in range(9)] + [_row(9, 0, 20, 0.0, True)]
    assert find_outliers(rows) == []  # 6.7x the median, but only 17 tokens more
    assert len(find_outliers(rows, min_excess_tokens=10)) == 1


def _sample_row(item: int, seed: int, text: str, finish: str, reference: int) -> Sample:
    extraction: Extraction = extract_integer(text)
    health = sample_health(text, None, len(text.split()), finish, extraction, reference)
    return Sample(item_id=str(item), seed=seed, health=health)


def test_aggregate_health() -> None:
    rows = [
        _sample_row(1, 0, "The answer is 5", "stop", 5),
        _sample_row(1, 1, "The answer is 6", "stop", 5),
        _sample_row(2, 0, "The answer is 7", "stop", 7),
        _sample_row(2, 1, "The answer is 7.5", "length", 7),
        _sample_row(3, 0, "", "error", 3),
        _sample_row(3, 1, "", "stop", 3),
    ]
    agg = aggregate_health(rows)
    assert (agg.n, agg.n_error, agg.n_scored, agg.n_items) == (6, 1, 5, 3)
    assert agg.accuracy == pytest.approx(2 / 5)  # the error is not a wrong answer
    expected_se = math.sqrt(_miller_var([True, False, True, False, False],
                                        ["1", "1", "2", "2", "3"]))
    assert agg.accuracy_se == pytest.approx(expected_se)
    assert agg.invalid_reasons == {"no_answer": 1, "non_integral": 1}
    assert agg.invalid_rate == pytest.approx(2 / 5)
    assert agg.truncated_rate == pytest.approx(1 / 5)
    assert agg.natural_stop_rate == pytest.approx(4 / 5)
    assert agg.empty_rate == pytest.approx(1 / 5)
    assert agg.error_rate == pytest.approx(1 / 6)
    assert agg.median_output_tokens == 4.0
    assert agg.outliers == []
    json.dumps(agg.to_dict(), allow_nan=False)


def test_aggregate_reports_the_long_correct_output() -> None:
    rows = [_sample_row(i, 0, f"Short. The answer is {i}", "stop", i) for i in range(30)]
    loop = "I will check again. " * 80 + "The answer is 4"
    rows.append(_sample_row(4, 1, loop, "stop", 4))
    agg = aggregate_health(rows)
    outliers = agg.outliers
    assert outliers is not None and len(outliers) == 1
    assert outliers[0].item_id == "4" and outliers[0].seed == 1
    assert outliers[0].correct is True and (outliers[0].seq_rep_4 or 0) > 0.9
    assert agg.accuracy == 1.0


def test_aggregate_of_nothing_is_json_safe() -> None:
    agg = aggregate_health([])
    assert agg.n == 0 and agg.accuracy is None and agg.accuracy_se is None
    assert agg.invalid_rate is None and agg.outliers == []
    json.dumps(agg.to_dict(), allow_nan=False)
