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
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from abgate.records.samples import SampleHealthRecord
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


@dataclass(frozen=True)
class Outlier:
    """One sample a reviewer should look at, and why."""

    item_id: str
    seed: int
    output_tokens: int
    seq_rep_4: float
    correct: bool | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        """The fields as a flat, JSON-ready dict."""
        return asdict(self)


def find_outliers(
    rows: Sequence[Mapping[str, Any]],
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
    Rows need ``item_id``, ``seed``, ``output_tokens``, ``seq_rep_4`` and
    ``correct``; rows with a true ``error`` are skipped. Longest first.
    """
    live = [row for row in rows if not row.get("error", False)]
    if not live:
        return []
    median = statistics.median(int(row["output_tokens"]) for row in live)
    found: list[Outlier] = []
    for row in live:
        tokens, rep = int(row["output_tokens"]), float(row["seq_rep_4"])
        reasons = []
        if tokens > length_factor * median and tokens - median >= min_excess_tokens:
            ratio = f"{tokens / median:.1f}x" if median > 0 else "far above"
            reasons.append(f"{tokens} tokens, {ratio} the median {median:g}")
        if rep >= rep_threshold:
            reasons.append(f"seq-rep-4 {rep:.2f}")
        if reasons:
            found.append(
                Outlier(
                    item_id=str(row["item_id"]),
                    seed=int(row["seed"]),
                    output_tokens=tokens,
                    seq_rep_4=rep,
                    correct=row.get("correct"),
                    why="; ".join(reasons),
                )
            )
    found.sort(key=lambda o: (-o.output_tokens, -o.seq_rep_4, o.item_id, o.seed))
    return found


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _summary(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), float(statistics.median(values))


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> int | None:
    """Total of an integer field; None when a row predates the field."""
    values = [row.get(key) for row in rows]
    if any(v is None for v in values):
        return None
    return sum(int(v) for v in values if v is not None)


def health_counts(live: Sequence[Mapping[str, Any]],
                  scored: Sequence[Mapping[str, Any]]) -> dict[str, int | None]:
    """The counts behind the rates, and the suspicious characters apart: U+FFFD, NUL
    and the other control characters (tab, newline and CR are not counted)."""
    nul, control = _sum(live, "nul_chars"), _sum(live, "control_chars")
    return {
        "n_live": len(live),
        "n_scored": len(scored),
        "n_correct": sum(1 for r in scored if r.get("correct")),
        "n_invalid": sum(1 for r in live if r.get("invalid")),
        "n_truncated": sum(1 for r in live if r.get("truncated")),
        "n_natural_stop": sum(1 for r in live if r.get("natural_stop")),
        "replacement_chars": _sum(live, "replacement_chars"),
        "n_with_replacement_chars": sum(1 for r in live if r.get("replacement_chars", 0) > 0),
        "nul_chars": nul,
        "n_with_nul_chars": (None if nul is None else
                             sum(1 for r in live if r.get("nul_chars", 0) > 0)),
        "other_control_chars": None if nul is None or control is None else control - nul,
    }


def aggregate_health(rows: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """Per-run summary of per-sample health rows (SampleHealth fields + item_id, seed).

    Error samples count in ``n`` and ``n_error`` only; every rate and summary is over
    the other samples, and accuracy over the scored ones (``correct`` not None).
    Statistics that cannot be computed (no samples, one item for the SE) are None.
    """
    live = [row for row in rows if not row.get("error", False)]
    scored = [row for row in live if row.get("correct") is not None]
    accuracy, se = clustered_accuracy(
        [bool(row["correct"]) for row in scored], [str(row["item_id"]) for row in scored]
    )
    reps = [float(row["seq_rep_4"]) for row in live]
    lengths = [float(row["output_tokens"]) for row in live]
    mean_rep, median_rep = _summary(reps)
    mean_len, median_len = _summary(lengths)
    n_live = len(live)
    reasons = Counter(str(row.get("invalid_reason")) for row in live if row.get("invalid"))
    return {
        "n": len(rows),
        "n_scored": len(scored),
        "n_error": len(rows) - n_live,
        "n_items": len({str(row["item_id"]) for row in scored}),
        "accuracy": _finite(accuracy),
        "accuracy_se": _finite(se),
        "error_rate": _rate(len(rows) - n_live, len(rows)),
        "invalid_rate": _rate(sum(reasons.values()), n_live),
        "invalid_reasons": dict(sorted(reasons.items())),
        "truncated_rate": _rate(sum(1 for r in live if r.get("truncated")), n_live),
        "natural_stop_rate": _rate(sum(1 for r in live if r.get("natural_stop")), n_live),
        "empty_rate": _rate(sum(1 for r in live if r.get("empty")), n_live),
        "replacement_char_rate": _rate(
            sum(1 for r in live if r.get("replacement_chars", 0) > 0), n_live
        ),
        "control_char_rate": _rate(sum(1 for r in live if r.get("control_chars", 0) > 0), n_live),
        "mean_seq_rep_4": mean_rep,
        "median_seq_rep_4": median_rep,
        "mean_output_tokens": mean_len,
        "median_output_tokens": median_len,
        "outliers": [outlier.to_dict() for outlier in find_outliers(live)],
        "counts": health_counts(live, scored),
    }
