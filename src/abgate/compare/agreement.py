"""Distribution agreement of a candidate arm with the baseline (pure functions).

The A/B scoring pass teacher-forces both arms on the same tokens (the baseline's own
greedy output) and writes, per (item, seed) key, the per-position KL(baseline ||
candidate), both arms' argmax token, both arms' log-probability of the scored token
and their top-5 (``agreement.jsonl``; the contract is in docs/statistics.md).
:func:`summarize_agreement` turns those rows into the ``agreement`` section of a
comparison:

- mean KLD, token-weighted over all scored positions (as ``llama-perplexity
  --kl-divergence`` reports it), with a standard error clustered by item (the ratio
  estimator of :func:`abgate.compare.stats.cluster_ratio`) and a Student-t interval
  on items - 1 degrees of freedom;
- percentiles of the per-token KL, the share of exactly-zero KL, a log-binned
  histogram;
- top-1 agreement (same most likely token), clustered the same way;
- delta-p = p_cand(token) - p_base(token) of the scored token: mean (clustered SE),
  RMS and percentiles;
- the items and positions with the largest KL, with both arms' top tokens.

Rows with the ``top_k`` method carry KL over the baseline's top-k tokens plus one
remainder bucket: a coarser partition, so by the data-processing inequality it is a
lower bound of the full KL. The section says ``approximate: true`` then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from abgate.compare.agreement_rows import AgreementRow, agreement_row_of
from abgate.compare.stats import cluster_ratio, t_quantile
from abgate.records.agreement import (
    Agreement,
    DeltaP,
    DpPercentiles,
    Histogram,
    KlPercentiles,
    Position,
    RatioStat,
    WorstItem,
)

__all__ = ["HIST_EDGES", "KL_CAP", "not_measured", "summarize_agreement"]

# Per-token KL that is not finite (inf: the candidate gave a token ~0 probability;
# nan: broken numerics) is counted and set to this many nats (uniform over a 150k
# vocabulary is 11.9), so a broken arm yields a large, finite mean. Finite values are
# kept as they are, except tiny negatives from rounding, which count as 0.
KL_CAP = 50.0
TOP_POSITIONS = 10
TOP_ITEMS = 10
TOP_TOKENS = 5
# Histogram edges: 1e-6 to 1e2 nats, two bins per decade (below and above: counted).
HIST_EDGES = tuple(10.0 ** (e / 2.0) for e in range(-12, 5))
KL_PERCENTILES = (("median", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9),
                  ("max", 100.0))
DP_PERCENTILES = (("min", 0.0), ("p01", 1.0), ("p05", 5.0), ("p10", 10.0), ("median", 50.0),
                  ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("max", 100.0))

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class _Row:
    key: str
    item_id: str
    method: str
    k: int | None
    source: str
    tokens: list[int]
    kl: FloatArray
    agree: NDArray[np.bool_]
    dp: FloatArray
    top_base: Sequence[Any]
    top_cand: Sequence[Any]
    top1_base: list[Any]
    top1_cand: list[Any]


def not_measured(reason: str) -> Agreement:
    """The agreement section when nothing could be measured, with the reason."""
    return Agreement(measured=False, reason=reason)


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _floats(values: Sequence[Any]) -> FloatArray:
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[i] = float(v)
    return out


def _parse(row: AgreementRow) -> _Row:
    tokens, top1_base, top1_cand = row.tokens or [], row.top1_base or [], row.top1_cand or []
    dp = np.exp(_floats(row.logp_cand or [])) - np.exp(_floats(row.logp_base or []))
    return _Row(
        key=row.row_key, item_id=row.row_item, method=str(row.method), k=row.k,
        source=row.source or "unknown", tokens=list(tokens), kl=_floats(row.kl or []),
        agree=np.array([x == y for x, y in zip(top1_base, top1_cand, strict=True)],
                       dtype=bool),
        dp=dp, top_base=row.top_base or [], top_cand=row.top_cand or [],
        top1_base=list(top1_base), top1_cand=list(top1_cand))


@dataclass(frozen=True)
class _Counts:
    """What :func:`_rows` read and left out."""

    n_rows: int
    n_skipped: int
    n_duplicate_keys: int
    n_empty: int
    problems: tuple[str, ...]


def _rows(rows: Sequence[AgreementRow | Mapping[str, Any]]) -> tuple[list[_Row], _Counts]:
    """Usable rows (first of each key, at least one token) and what was left out."""
    usable: list[_Row] = []
    seen: set[str] = set()
    problems: list[str] = []
    skipped = duplicates = empty = 0
    for index, row in enumerate(rows):
        typed = agreement_row_of(row) if isinstance(row, Mapping | AgreementRow) else None
        problem = typed.problem() if typed is not None else "not a JSON object"
        if typed is None or problem is not None:
            skipped += 1
            problems.append(f"row {index + 1}: {problem}")
            continue
        parsed = _parse(typed)
        if parsed.key in seen:
            duplicates += 1
        elif not parsed.tokens:
            empty += 1
        else:
            seen.add(parsed.key)
            usable.append(parsed)
    return usable, _Counts(len(rows), skipped, duplicates, empty, tuple(problems[:3]))


def _ratio_section(sums: FloatArray, counts: FloatArray, confidence: float,
                   bounds: tuple[float, float] = (-math.inf, math.inf)) -> RatioStat:
    """Ratio, clustered SE and two-sided Student-t interval (clipped to ``bounds``)."""
    estimate, se = cluster_ratio(list(sums), list(counts))
    df = int(sums.size) - 1
    t = t_quantile(0.5 + confidence / 2.0, df)
    low, high = estimate - t * se, estimate + t * se
    low, high = max(bounds[0], low), min(bounds[1], high)
    return RatioStat(estimate=_num(estimate), se=_num(se), df=df if df >= 1 else None,
                     ci=(_num(low), _num(high)), confidence=confidence)


def _percentiles(values: FloatArray, spec: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """Percentiles by name (the fields of :class:`KlPercentiles` or :class:`DpPercentiles`)."""
    if not values.size:
        return {name: None for name, _ in spec}
    found = np.percentile(values, [q for _, q in spec])
    return {name: _num(float(v)) for (name, _), v in zip(spec, found, strict=True)}


def _histogram(kl: FloatArray) -> Histogram:
    edges = np.asarray(HIST_EDGES)
    inside = kl[(kl >= edges[0]) & (kl <= edges[-1])]
    counts, _ = np.histogram(inside, bins=edges)
    return Histogram(edges=HIST_EDGES, counts=tuple(int(c) for c in counts),
                     below=int(np.sum(kl < edges[0])), above=int(np.sum(kl > edges[-1])),
                     unit="nats")


def _tops(entries: Sequence[Any], position: int) -> list[list[Any]] | None:
    """Up to five ``[token_id, logprob]`` (plus the token text when recorded)."""
    if position >= len(entries) or not isinstance(entries[position], list):
        return None
    out = []
    for entry in entries[position][:TOP_TOKENS]:
        if isinstance(entry, list | tuple) and len(entry) >= 2:
            logprob = entry[1] if isinstance(entry[1], int | float) else None
            shown: list[Any] = [entry[0], None if logprob is None else _num(float(logprob))]
            if len(entry) > 2 and isinstance(entry[2], str):
                shown.append(entry[2])
            out.append(shown)
    return out


def _largest(rows: Sequence[_Row], kl: FloatArray, limit: int) -> tuple[Position, ...]:
    """The ``limit`` positions with the largest KL (ties: key, then position)."""
    owner = np.concatenate([np.full(r.kl.size, i) for i, r in enumerate(rows)])
    position = np.concatenate([np.arange(r.kl.size) for r in rows])
    keys = np.array([rows[i].key for i in owner], dtype=str)
    order = np.lexsort((position, keys, -kl))[:limit]
    out = []
    for index in order:
        row, pos = rows[int(owner[index])], int(position[index])
        out.append(Position(key=row.key, item_id=row.item_id, position=pos,
                            kl=_num(float(kl[index])), token=row.tokens[pos],
                            top1_base=row.top1_base[pos], top1_cand=row.top1_cand[pos],
                            delta_p=_num(float(row.dp[pos])),
                            top_base=_tops(row.top_base, pos),
                            top_cand=_tops(row.top_cand, pos)))
    return tuple(out)


@dataclass(frozen=True)
class _Items:
    """Per item (sorted ids): KL sum, agreement count, token count, max KL, Δp sum and
    the count of finite Δp."""

    items: NDArray[np.str_]
    kl: FloatArray
    agree: FloatArray
    tokens: FloatArray
    max: FloatArray
    dp: FloatArray
    dp_tokens: FloatArray


def _per_item(rows: Sequence[_Row], kl_rows: Sequence[FloatArray]) -> _Items:
    items = sorted({r.item_id for r in rows})
    index = {item: i for i, item in enumerate(items)}
    kl_sum, agree, tokens, top, dp, dp_tokens = (np.zeros(len(items)) for _ in range(6))
    for row, kl in zip(rows, kl_rows, strict=True):
        i = index[row.item_id]
        finite_dp = row.dp[np.isfinite(row.dp)]
        kl_sum[i] += float(kl.sum())
        agree[i] += float(row.agree.sum())
        tokens[i] += kl.size
        top[i] = max(top[i], float(kl.max()))
        dp[i] += float(finite_dp.sum())
        dp_tokens[i] += finite_dp.size
    return _Items(np.array(items, dtype=str), kl_sum, agree, tokens, top, dp, dp_tokens)


def _worst_items(cols: _Items, limit: int) -> tuple[WorstItem, ...]:
    mean = cols.kl / cols.tokens
    order = np.lexsort((cols.items, -mean))[:limit]
    return tuple(WorstItem(item_id=str(cols.items[i]), n_tokens=int(cols.tokens[i]),
                           mean_kld=_num(float(mean[i])), max_kl=_num(float(cols.max[i])),
                           top1_agreement=_num(float(cols.agree[i] / cols.tokens[i])))
                 for i in order)


def _method(rows: Sequence[_Row]) -> dict[str, Any]:
    methods = sorted({r.method for r in rows})
    ks = sorted({r.k for r in rows if r.method == "top_k" and r.k is not None})
    return {"method": methods[0] if len(methods) == 1 else "mixed",
            "k": ks[0] if ks else None, "approximate": "top_k" in methods,
            "source": ", ".join(sorted({r.source for r in rows}))}


def _delta_p(rows: Sequence[_Row], cols: _Items, confidence: float) -> DeltaP:
    dp = np.concatenate([r.dp for r in rows])
    finite = dp[np.isfinite(dp)]
    rms = float(np.sqrt(np.mean(finite * finite))) if finite.size else math.nan
    return DeltaP(mean=_ratio_section(cols.dp, cols.dp_tokens, confidence), rms=_num(rms),
                  n_tokens=int(finite.size),
                  percentiles=DpPercentiles(**_percentiles(finite, DP_PERCENTILES)))


def summarize_agreement(rows: Sequence[AgreementRow | Mapping[str, Any]], *,
                        confidence: float = 0.95) -> Agreement:
    """The agreement section from one candidate arm's ``agreement.jsonl`` rows (as
    :class:`~abgate.compare.agreement_rows.AgreementRow`, or lines as read).

    Never raises on bad rows: they are counted (``n_skipped``, the first three
    ``problems``), and with no usable row the section is :func:`not_measured`.
    """
    usable, counts = _rows(rows)
    if not usable:
        problems = counts.problems
        reason = f"no usable agreement rows ({counts.n_rows} read"
        if problems:
            reason += "; " + "; ".join(problems)
        return Agreement(measured=False, reason=reason + ")", **asdict(counts))
    raw = [r.kl for r in usable]
    n_nonfinite = int(sum(np.sum(~np.isfinite(k)) for k in raw))
    n_negative = int(sum(np.sum((k < 0) & np.isfinite(k)) for k in raw))
    kl_rows = [np.maximum(np.nan_to_num(k, nan=KL_CAP, posinf=KL_CAP, neginf=KL_CAP), 0.0)
               for k in raw]
    kl = np.concatenate(kl_rows)
    cols = _per_item(usable, kl_rows)
    return Agreement(
        measured=True, **_method(usable), **asdict(counts), n_keys=len(usable),
        n_items=int(cols.items.size), n_tokens=int(kl.size), n_nonfinite_kl=n_nonfinite,
        n_negative_kl=n_negative, kl_cap=KL_CAP,
        mean_kld=_ratio_section(cols.kl, cols.tokens, confidence, (0.0, math.inf)),
        kl_percentiles=KlPercentiles(**_percentiles(kl, KL_PERCENTILES)),
        zero_kl_fraction=float(np.mean(kl == 0.0)),
        top1_agreement=_ratio_section(cols.agree, cols.tokens, confidence, (0.0, 1.0)),
        delta_p=_delta_p(usable, cols, confidence), histogram=_histogram(kl),
        largest_positions=_largest(usable, kl, TOP_POSITIONS),
        largest_items=_worst_items(cols, TOP_ITEMS))
