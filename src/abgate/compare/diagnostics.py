"""Diagnostics of a paired comparison: reported, never deciding unless a policy says so.

- token-hash identity: pairs whose output token IDs are identical (e.g. ``"8/96"``);
- prompt mismatches: pairs whose prompt token hashes differ (arms not truly matched);
- output length: mean per arm, mean difference and mean absolute difference;
- speed drift: per arm, how much faster its later half ran than its earlier half;
- the pairs with the largest length change and the largest seq-rep-4 change, each
  with a one-line description such as
  ``"1653 tokens / rep 0.199 -> 3626 / 0.507, still correct"``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from abgate.compare.pairing import Pair
from abgate.records.comparison import (
    ArmFloats,
    ChangeRow,
    Diagnostics,
    IdenticalOutputs,
    OutputTokens,
)
from abgate.records.samples import Sample

__all__ = ["change_text", "diagnostics", "same_output"]

TOP_N = 5


def _tokens(sample: Sample) -> int | None:
    if sample.output.tokens is not None:
        return int(sample.output.tokens)
    value = sample.health_value("output_tokens")
    return int(value) if value is not None else None


def _rep(sample: Sample) -> float | None:
    value = sample.health_value("seq_rep_4")
    return float(value) if value is not None else None


def same_output(a: Sample, b: Sample) -> bool | None:
    """Whether two samples' output token IDs are identical; None when unknown."""
    ids_a, ids_b = a.output.token_ids, b.output.token_ids
    if ids_a is not None and ids_b is not None:
        return list(ids_a) == list(ids_b)
    hash_a, hash_b = a.output.sha256, b.output.sha256
    if hash_a is not None and hash_b is not None:
        return bool(hash_a == hash_b)
    return None


def _correctness(a: Any, b: Any) -> str:
    if a is None or b is None:
        return "unscored"
    if a and b:
        return "still correct"
    if not a and not b:
        return "still wrong"
    return "became wrong" if a else "became correct"


def _rep_text(sample: Sample) -> str:
    rep = _rep(sample)
    return f"{rep:.3f}" if rep is not None else "?"


def change_text(pair: Pair) -> str:
    """``"<key>: 1653 tokens / rep 0.199 -> 3626 / 0.507, still correct"``."""
    where = _correctness(pair.a.correct, pair.b.correct)
    return (f"{pair.key}: {_tokens(pair.a)} tokens / rep {_rep_text(pair.a)} -> "
            f"{_tokens(pair.b)} / {_rep_text(pair.b)}, {where}")


def _row(pair: Pair) -> ChangeRow:
    return ChangeRow(key=pair.key, a_tokens=_tokens(pair.a), b_tokens=_tokens(pair.b),
                     a_rep=_rep(pair.a), b_rep=_rep(pair.b), a_correct=pair.a.correct,
                     b_correct=pair.b.correct, text=change_text(pair))


def _largest(pairs: Sequence[Pair], size: Callable[[Pair], float | None]) -> tuple[ChangeRow, ...]:
    scored = [(value, p) for p in pairs if (value := size(p)) is not None and value > 0]
    scored.sort(key=lambda vp: (-vp[0], vp[1].key))
    return tuple(_row(p) for _, p in scored[:TOP_N])


def _length_change(pair: Pair) -> float | None:
    a, b = _tokens(pair.a), _tokens(pair.b)
    return abs(b - a) if a is not None and b is not None else None


def _rep_change(pair: Pair) -> float | None:
    a, b = _rep(pair.a), _rep(pair.b)
    return abs(b - a) if a is not None and b is not None else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def drift(samples: Sequence[Sample]) -> float | None:
    """Median steady decode tok/s of the later half of an arm's samples (by finish
    time) over that of the earlier half, minus 1; None with fewer than 4 rates.

    Items differ between halves, so a few percent is normal; a large value means the
    machine changed speed while the arm ran, which a sequential A-then-B schedule
    would mistake for an effect of the switch."""
    timed = [(float(s.finished_at or index), float(tps)) for index, s in enumerate(samples)
             if (tps := s.timing.steady_decode_tps)]
    if len(timed) < 4:
        return None
    rates = [tps for _, tps in sorted(timed)]
    half = len(rates) // 2
    return statistics.median(rates[-half:]) / statistics.median(rates[:half]) - 1.0


def diagnostics(pairs: Sequence[Pair]) -> Diagnostics:
    """The diagnostics section of a comparison, over the non-error pairs."""
    same = [s for p in pairs if (s := same_output(p.a, p.b)) is not None]
    n_same = sum(1 for s in same if s)
    prompts = [p.a.prompt.sha256 != p.b.prompt.sha256 for p in pairs
               if p.a.prompt.sha256 is not None and p.b.prompt.sha256 is not None]
    lengths = [(a, b) for p in pairs
               if (a := _tokens(p.a)) is not None and (b := _tokens(p.b)) is not None]
    return Diagnostics(
        identical_outputs=IdenticalOutputs(n=n_same, of=len(same), text=f"{n_same}/{len(same)}",
                                           fraction=n_same / len(same) if same else None),
        prompt_mismatches=sum(prompts),
        output_tokens=OutputTokens(
            a_mean=_mean([a for a, _ in lengths]), b_mean=_mean([b for _, b in lengths]),
            mean_diff=_mean([b - a for a, b in lengths]),
            mean_abs_diff=_mean([abs(b - a) for a, b in lengths])),
        speed_drift=ArmFloats(a=drift([p.a for p in pairs]), b=drift([p.b for p in pairs])),
        largest_length_changes=_largest(pairs, _length_change),
        largest_repetition_changes=_largest(pairs, _rep_change))
