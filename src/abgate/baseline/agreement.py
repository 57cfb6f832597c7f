"""Every request of a case against its greedy reference: the warm-up(s) and each
measured repeat, counted, with the first divergence named.

At ``baseline record`` the reference is the first measured repeat, and the record is
refused when its own warm-up or repeats disagree with it (greedy decoding that is not
repeatable on one build is no reference). At ``baseline check`` the reference is the
recorded output and every current request must reproduce it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from abgate.bench.samples import BenchSample
from abgate.records.bench_sections import Divergence, RepeatAgreement


def first_divergence(ref: Sequence[object], cur: Sequence[object]) -> int | None:
    """The first position where ``cur`` differs from ``ref`` (a length difference counts
    at the shorter length); None when they are equal."""
    for i, (a, b) in enumerate(zip(ref, cur, strict=False)):
        if a != b:
            return i
    return None if len(ref) == len(cur) else min(len(ref), len(cur))


def request_label(sample: BenchSample, warmup: int) -> str:
    i = sample.index
    return f"warm-up {i + 1}" if sample.warmup else f"repeat {i - warmup + 1}"


def divergence(ref_ids: Sequence[int] | None, ref_text: str | None,
               sample: BenchSample, request: str) -> Divergence | None:
    """Where one request's output (``request`` names it) leaves the reference: by token
    ID where both sides have them, else by character of the text; None when it matches."""
    ids, text = sample.output.token_ids, sample.output.text
    if ref_ids is not None and ids is not None:
        pos = first_divergence(ref_ids, ids)
        if pos is None:
            return None
        return Divergence(request=request, position=pos, unit="token",
                          reference_token=ref_ids[pos] if pos < len(ref_ids) else None,
                          current_token=ids[pos] if pos < len(ids) else None)
    if ref_text is not None and ref_text == text:
        return None
    pos = first_divergence(list(ref_text or ""), list(text or ""))
    return Divergence(request=request, position=pos or 0, unit="character",
                      reference_token=None, current_token=None)


def agreement(ref_ids: Sequence[int] | None, ref_text: str | None,
              samples: Sequence[BenchSample]) -> RepeatAgreement:
    """How many of the warm-up and measured requests reproduce the reference, and the
    first one that does not (in the order they ran)."""
    n_warm = sum(1 for s in samples if s.warmup)
    total: Counter[bool] = Counter()  # by warm-up (True) or measured (False)
    matched: Counter[bool] = Counter()
    first: Divergence | None = None
    for s in samples:
        total[s.warmup] += 1
        div = divergence(ref_ids, ref_text, s, request_label(s, n_warm))
        if div is None:
            matched[s.warmup] += 1
        elif first is None:
            first = div
    (wm, wn), (mm, mn) = (matched[True], total[True]), (matched[False], total[False])
    return RepeatAgreement(measured=mn, measured_match=mm, warmup=wn, warmup_match=wm,
                     all_match=first is None, first_divergence=first,
                     summary=summary(mm, mn, wm, wn))


def summary(mm: int, mn: int, wm: int, wn: int) -> str:
    """``3/3 repeats and the warm-up match`` / ``2/3 repeats match, the warm-up differs``."""
    repeats = f"{mm}/{mn} repeat{'s' if mn != 1 else ''}"
    if wn == 0:
        return f"{repeats} match (no warm-up)"
    warm = "the warm-up" if wn == 1 else f"{wm}/{wn} warm-ups"
    if wm == wn:
        return f"{repeats} and {warm} match"
    if wn == 1:
        return f"{repeats} match, the warm-up differs"
    return f"{repeats} and {warm} match"
