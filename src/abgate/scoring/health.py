"""Output-health and repetition metrics: per sample, then aggregated per run.

Per sample (:func:`sample_health`): correct, invalid (with the extraction's
reason), truncated (finish reason ``length``), natural stop, engine error, empty
output, U+FFFD replacement characters, NUL characters, control characters (NUL
included), output length and
seq-rep-4 (Welleck et al. 2019, "Neural Text Generation with Unlikelihood
Training": the share of repeated 4-grams in one continuation) over token IDs
and over words.

Per run (:func:`aggregate_health`): accuracy with a standard error clustered by
item across seeds (Miller 2024, "Adding Error Bars to Evals"), the invalid,
truncated and natural-stop rates with their counts (``counts``: correct n/N,
invalid, truncated, natural stops, and U+FFFD, NUL and other control characters
apart), repetition and length summaries, and an outlier list a reviewer can read at
a glance.

Samples whose finish reason is ``error`` are never scored as wrong answers: they
are counted in ``n_error`` and left out of every other denominator.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import TypeVar

from abgate.records.samples import Sample, SampleHealthRecord
from abgate.records.sections import HealthCounts, Outlier, QualitySummary
from abgate.scoring.extract import Extraction

__all__ = [
    "Outlier",
    "aggregate_health",
    "clustered_accuracy",
    "count_control_chars",
    "find_outliers",
    "sample_health",
    "seq_rep_n",
]

_ALLOWED_CONTROLS = frozenset("\t\n\r")
_T = TypeVar("_T")


def seq_rep_n(tokens: Sequence[Hashable], n: int = 4) -> float:
    """``1 - unique n-grams / total n-grams``; 0.0 when there are fewer than ``n`` tokens."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    total = len(tokens) - n + 1
    if total <= 0:
        return 0.0
    unique = len({tuple(tokens[i : i + n]) for i in range(total)})
    return 1.0 - unique / total


def count_control_chars(text: str) -> int:
    """C0 controls (NUL included) except tab/newline/carriage return, DEL, and C1 controls."""
    return sum(
        1 for ch in text if (ch < " " or "\x7f" <= ch <= "\x9f") and ch not in _ALLOWED_CONTROLS
    )


def sample_health(
    text: str,
    token_ids: Sequence[int] | None,
    output_tokens: int,
    finish_reason: str,
    extraction: Extraction,
    reference: int | None,
    *,
    matched: bool | None = None,
) -> SampleHealthRecord:
    """Health of one output (the model a sample line records it as).

    ``seq_rep_4`` is over ``token_ids`` when given, else over whitespace-separated
    words (then it equals ``seq_rep_4_words``). ``reference=None`` leaves the sample
    unscored (``correct=None``). An ``error`` sample is neither correct, wrong nor
    invalid. ``matched`` (a text-scored item, :mod:`abgate.scoring.text`) decides
    ``correct`` instead of the extraction; its output is invalid only when empty.
    """
    error = finish_reason == "error"
    words = text.split()
    rep_words = seq_rep_n(words, 4)
    rep_tokens = seq_rep_n(token_ids, 4) if token_ids is not None else rep_words
    why: str | None
    if matched is not None:  # a text-scored item (scoring.text): empty output is invalid
        correct: bool | None = None if error else matched
        invalid, why = not error and not words, "empty"
    else:
        correct = None if error or reference is None else (
            extraction.value is not None and extraction.value == reference)
        invalid, why = not error and not extraction.valid, extraction.reason
    return SampleHealthRecord(
        correct=correct,
        invalid=invalid,
        invalid_reason=why if invalid else None,
        truncated=finish_reason == "length",
        natural_stop=finish_reason == "stop",
        error=error,
        empty=not words,
        replacement_chars=text.count("\ufffd"),
        control_chars=count_control_chars(text),
        output_tokens=output_tokens,
        seq_rep_4=rep_tokens,
        seq_rep_4_words=rep_words,
        nul_chars=text.count("\x00"),
    )


def clustered_accuracy(correct: Sequence[bool], clusters: Sequence[str]) -> tuple[float, float]:
    """Mean accuracy and its standard error clustered by ``clusters`` (e.g. item id).

    Miller (2024), eq. for clustered standard errors::

        SE^2 = SE_CLT^2 + 1/n^2 * sum_c sum_i sum_{j != i} (s_ic - mean)(s_jc - mean)
             = 1/n^2 * sum_c (sum_{i in c} (s_ic - mean))^2

    with ``SE_CLT^2 = 1/n^2 * sum_i (s_i - mean)^2``, so with one sample per cluster
    it is the familiar ``sqrt(p(1-p)/n)``, and repeating every item k times with the
    same outcome gives the SE of the distinct items, not one sqrt(k) times smaller.
    No small-sample (C/(C-1)) correction is applied. Returns ``(nan, nan)`` for no
    samples and ``(mean, nan)`` for a single cluster, whose spread cannot be estimated
    (the formula would give a misleading 0).
    """
    if len(correct) != len(clusters):
        raise ValueError(f"{len(correct)} outcomes but {len(clusters)} cluster labels")
    n = len(correct)
    if n == 0:
        return math.nan, math.nan
    mean = sum(1 for c in correct if c) / n
    residuals: dict[str, float] = {}
    for outcome, cluster in zip(correct, clusters, strict=True):
        residuals[cluster] = residuals.get(cluster, 0.0) + (float(outcome) - mean)
    if len(residuals) < 2:
        return mean, math.nan
    return mean, math.sqrt(sum(r * r for r in residuals.values())) / n


def _live(samples: Sequence[Sample]) -> list[Sample]:
    """The samples that are not engine errors (their health says so)."""
    return [s for s in samples if not s.health.error]


def find_outliers(
    samples: Sequence[Sample],
    *,
    length_factor: float = 3.0,
    min_excess_tokens: int = 32,
    rep_threshold: float = 0.4,
) -> list[Outlier]:
    """Samples far longer than the run's median length, or with high seq-rep-4.

    "Far longer" is more than ``length_factor`` times the median output length *and*
    at least ``min_excess_tokens`` above it (so a 10-token sample in a run of
    3-token outputs is not news). "Repetitive" is ``seq_rep_4 >= rep_threshold``;
    GSM8K reference solutions stay below 0.16 (see ``docs/answer-extraction.md``).
    Samples need ``item_id``, ``seed`` and a health with ``output_tokens``,
    ``seq_rep_4`` and ``correct``; samples whose health says ``error`` are skipped.
    Longest first.
    """
    live = _live(samples)
    if not live:
        return []
    median = statistics.median(int(_need(s.health.output_tokens)) for s in live)
    found: list[Outlier] = []
    for s in live:
        tokens, rep = int(_need(s.health.output_tokens)), float(_need(s.health.seq_rep_4))
        reasons = []
        if tokens > length_factor * median and tokens - median >= min_excess_tokens:
            ratio = f"{tokens / median:.1f}x" if median > 0 else "far above"
            reasons.append(f"{tokens} tokens, {ratio} the median {median:g}")
        if rep >= rep_threshold:
            reasons.append(f"seq-rep-4 {rep:.2f}")
        if reasons:
            found.append(Outlier(item_id=str(s.item_id), seed=int(_need(s.seed)),
                                 output_tokens=tokens, seq_rep_4=rep,
                                 correct=s.health.correct, why="; ".join(reasons)))
    found.sort(key=lambda o: (-(o.output_tokens or 0), -(o.seq_rep_4 or 0.0),
                              str(o.item_id), o.seed or 0))
    return found


def _need(value: _T | None) -> _T:
    """A field every health row has (a row without it is a writer's bug)."""
    if value is None:
        raise ValueError("a sample's health lacks a field it must have")
    return value


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _summary(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), float(statistics.median(values))


def _sum(values: Sequence[int | None]) -> int | None:
    """Total of an integer field; None when a sample predates the field."""
    if any(v is None for v in values):
        return None
    return sum(int(v) for v in values if v is not None)


def health_counts(live: Sequence[Sample], scored: Sequence[Sample]) -> HealthCounts:
    """The counts behind the rates, and the suspicious characters apart: U+FFFD, NUL
    and the other control characters (tab, newline and CR are not counted)."""
    hs = [s.health for s in live]
    nul, control = _sum([h.nul_chars for h in hs]), _sum([h.control_chars for h in hs])
    return HealthCounts(
        n_live=len(live),
        n_scored=len(scored),
        n_correct=sum(1 for s in scored if s.health.correct),
        n_invalid=sum(1 for h in hs if h.invalid),
        n_truncated=sum(1 for h in hs if h.truncated),
        n_natural_stop=sum(1 for h in hs if h.natural_stop),
        replacement_chars=_sum([h.replacement_chars for h in hs]),
        n_with_replacement_chars=sum(1 for h in hs if (h.replacement_chars or 0) > 0),
        nul_chars=nul,
        n_with_nul_chars=(None if nul is None else
                          sum(1 for h in hs if (h.nul_chars or 0) > 0)),
        other_control_chars=None if nul is None or control is None else control - nul,
    )


def aggregate_health(samples: Sequence[Sample]) -> QualitySummary:
    """Per-run summary of the samples' health (``summary.json``'s ``quality``).

    Error samples count in ``n`` and ``n_error`` only; every rate and summary is over
    the other samples, and accuracy over the scored ones (``correct`` not None).
    Statistics that cannot be computed (no samples, one item for the SE) are None.
    """
    live = _live(samples)
    scored = [s for s in live if s.health.correct is not None]
    accuracy, se = clustered_accuracy(
        [bool(s.health.correct) for s in scored], [str(s.item_id) for s in scored]
    )
    hs = [s.health for s in live]
    mean_rep, median_rep = _summary([float(_need(h.seq_rep_4)) for h in hs])
    mean_len, median_len = _summary([float(_need(h.output_tokens)) for h in hs])
    n_live = len(live)
    reasons = Counter(str(h.invalid_reason) for h in hs if h.invalid)
    return QualitySummary(
        n=len(samples),
        n_error=len(samples) - n_live,
        accuracy=_finite(accuracy),
        accuracy_se=_finite(se),
        mean_seq_rep_4=mean_rep,
        mean_output_tokens=mean_len,
        n_items=len({str(s.item_id) for s in scored}),
        counts=health_counts(live, scored),
        n_scored=len(scored),
        error_rate=_rate(len(samples) - n_live, len(samples)),
        invalid_rate=_rate(sum(reasons.values()), n_live),
        invalid_reasons=dict(sorted(reasons.items())),
        truncated_rate=_rate(sum(1 for h in hs if h.truncated), n_live),
        natural_stop_rate=_rate(sum(1 for h in hs if h.natural_stop), n_live),
        empty_rate=_rate(sum(1 for h in hs if h.empty), n_live),
        replacement_char_rate=_rate(sum(1 for h in hs if (h.replacement_chars or 0) > 0),
                                    n_live),
        control_char_rate=_rate(sum(1 for h in hs if (h.control_chars or 0) > 0), n_live),
        median_seq_rep_4=median_rep,
        median_output_tokens=median_len,
        outliers=find_outliers(live),
    )
