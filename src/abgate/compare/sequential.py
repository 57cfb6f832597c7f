"""Sequential (anytime-valid) gates: decide an A/B as soon as its verdict is certain.

Every statistical gate of the policy gets a confidence sequence over the items in the
order they ran (:mod:`abgate.compare.confseq`), looked at every ``look_every`` items:

- ``speed``: the per-item mean log ratio B/A of the policy's speed metric, through the
  asymptotic normal-mixture CS at the speed confidence (two-sided), after a burn-in of
  ``sequential.speed_burn_in`` items;
- ``accuracy``, ``invalid_rate``, ``truncated_rate``, ``error_rate``, ``repetition``:
  the per-item mean paired difference B - A (in [-1, 1]), through the betting CS, each
  bound at one-sided ``quality.alpha``;
- ``mean_kld``: the per-item mean KL(baseline || candidate) clipped at
  ``sequential.kld_clip`` nats (clipping only lowers a value, so a fail is a fail of the
  unclipped mean), and ``top1_agreement``: the per-item share of agreeing positions,
  both through the betting CS at one-sided ``quality.alpha``.

A gate passes or fails by the same limits as the fixed-N gate (``abgate.compare.gates``)
and stays decided (the bounds are running intersections). The A/B stops at the first
look where the verdict is decided: a gate fails (REJECT) or every gate passes (ACCEPT).
:func:`sequential_section` is a pure function of the samples, the agreement rows and
the item order, so an interrupted A/B that resumes reaches the same looks again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from abgate.compare.agreement import KL_CAP
from abgate.compare.agreement_rows import AgreementRow, agreement_row_of
from abgate.compare.confseq import betting_bounds, mixture_bounds
from abgate.compare.gates import FAIL, INCONCLUSIVE, PASS, Gate
from abgate.compare.paired import SPEED_METRICS
from abgate.compare.pairing import Pair, SampleLike, pair_samples
from abgate.compare.policy import Policy
from abgate.records.comparison import Look, Sequential

__all__ = ["sequential_section"]

FloatArray = NDArray[np.float64]
SPEED, KLD, TOP1 = "speed", "mean_kld", "top1_agreement"
# (gate, label, sign of harm in B - A, policy margin attribute, sample field)
_HARMS = (("accuracy", "accuracy", -1.0, "max_accuracy_drop", "correct"),
          ("invalid_rate", "invalid-answer rate", 1.0, "max_invalid_increase", "invalid"),
          ("truncated_rate", "truncation rate", 1.0, "max_truncated_increase", "truncated"),
          ("error_rate", "engine error rate", 1.0, "max_error_increase", "error"),
          ("repetition", "mean seq-rep-4", 1.0, "max_repetition_increase", "seq_rep_4"))


@dataclass(frozen=True)
class _Series:
    """One gate's per-item values in sequence order, the position (0-based index in the
    item order) of each, and the running bounds after each value."""

    name: str
    metric: str
    positions: NDArray[np.int64]
    values: FloatArray
    lower: FloatArray
    upper: FloatArray
    good_above: bool  # pass when the lower bound clears pass_limit (else the upper)
    pass_limit: float
    fail_limit: float
    burn_in: int
    unit: str
    sign: float = 1.0  # harm = sign * (B - A): the Gate reports B - A, as fixed-N gates do

    def at(self, n_items: int) -> tuple[int, float, float, float]:
        """(values seen, estimate, lower, upper) after the first ``n_items`` items."""
        k = int(np.searchsorted(self.positions, n_items))
        if k == 0:
            return 0, math.nan, -math.inf, math.inf
        est = float(self.values[:k].mean())
        if k < self.burn_in:
            return k, est, -math.inf, math.inf
        return k, est, float(self.lower[k - 1]), float(self.upper[k - 1])

    def outcome(self, n_items: int) -> str:
        _, _, low, high = self.at(n_items)
        if self.good_above:
            return PASS if low >= self.pass_limit else FAIL if high < self.fail_limit \
                else INCONCLUSIVE
        return PASS if high <= self.pass_limit else FAIL if low > self.fail_limit \
            else INCONCLUSIVE


def _per_item(order: Sequence[str], values: Mapping[str, list[float]]
              ) -> tuple[NDArray[np.int64], FloatArray]:
    index = {item: i for i, item in enumerate(order)}
    items = sorted((index[i], float(np.mean(v))) for i, v in values.items()
                   if v and i in index)
    return (np.array([p for p, _ in items], dtype=np.int64),
            np.array([v for _, v in items], dtype=float))


def _positive(value: Any) -> float | None:
    ok = isinstance(value, int | float) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def _speed_values(pairs: Sequence[Pair], metric: str) -> dict[str, list[float]]:
    sign = float(SPEED_METRICS[metric])
    out: dict[str, list[float]] = {}
    for p in pairs:
        a, b = _positive(p.a.timing.figure(metric)), _positive(p.b.timing.figure(metric))
        if a is not None and b is not None:
            out.setdefault(p.item_id, []).append(sign * math.log(b / a))
    return out


def _harm_values(pairs: Sequence[Pair], live: Sequence[Pair], field: str, sign: float
                 ) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    if field == "error":
        for p in pairs:
            diff = float(p.b.failed) - float(p.a.failed)
            out.setdefault(p.item_id, []).append(sign * diff)
        return out
    for p in live:
        a, b = ((p.a.correct, p.b.correct) if field == "correct"
                else (p.a.health_value(field), p.b.health_value(field)))
        if isinstance(a, int | float) and isinstance(b, int | float):
            out.setdefault(p.item_id, []).append(sign * (float(b) - float(a)))
    return out


def _agreement_values(rows: Sequence[AgreementRow | Mapping[str, Any]], clip: float
                      ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per item: mean KLD (token-weighted over its keys, clipped) and top-1 share."""
    sums: dict[str, list[float]] = {}
    seen: set[str] = set()
    for row in map(agreement_row_of, rows):
        key, kl = row.row_key, row.kl
        if key in seen or not kl:
            continue
        seen.add(key)
        vals = np.array([math.nan if v is None else v for v in kl], float)
        vals = np.maximum(np.nan_to_num(vals, nan=KL_CAP, posinf=KL_CAP, neginf=KL_CAP), 0.0)
        agree = sum(1 for x, y in zip(row.top1_base or [], row.top1_cand or [],
                                      strict=False) if x == y)
        acc = sums.setdefault(row.item_id or key.rsplit("#", 1)[0], [0, 0, 0])
        acc[0] += float(vals.sum())
        acc[1] += float(agree)
        acc[2] += float(vals.size)
    kld = {i: [min(s / n, clip) / clip] for i, (s, _, n) in sums.items()}
    top1 = {i: [g / n] for i, (_, g, n) in sums.items()}
    return kld, top1


def _bet(name: str, metric: str, order: Sequence[str], values: Mapping[str, list[float]],
         alpha: float, scale: tuple[float, float], limits: tuple[float, float],
         good_above: bool, unit: str, sign: float = 1.0) -> _Series:
    """A betting-CS series of values mapped from [lo, hi] onto [0, 1] and back."""
    lo, hi = scale
    pos, vals = _per_item(order, values)
    low, high = betting_bounds(np.clip((vals - lo) / (hi - lo), 0.0, 1.0), alpha)
    return _Series(name, metric, pos, vals, lo + (hi - lo) * low, lo + (hi - lo) * high,
                   good_above, limits[0], limits[1], 1, unit, sign)


def _series(pairing_pairs: Sequence[Pair], live: Sequence[Pair], order: Sequence[str],
            agreement: Sequence[AgreementRow | Mapping[str, Any]] | None,
            policy: Policy,
            speed_only: bool) -> list[_Series]:
    rule, seq, q = policy.speed, policy.sequential, policy.quality
    pos, vals = _per_item(order, _speed_values(live, rule.metric))
    low, high = mixture_bounds(vals, 1.0 - rule.confidence, seq.speed_opt_items,
                               start=seq.speed_burn_in)
    out = [_Series(SPEED, f"mean log ratio B/A of {rule.metric} per item", pos, vals, low,
                   high, True, math.log1p(rule.min_speedup), math.log1p(-rule.max_slowdown),
                   seq.speed_burn_in, "log")]
    if speed_only:
        return out
    for name, label, sign, margin_key, field in _HARMS:
        margin = float(getattr(q, margin_key))
        out.append(_bet(name, f"{label}: per-item mean harm {'A - B' if sign < 0 else 'B - A'}",
                        order, _harm_values(pairing_pairs, live, field, sign), q.alpha,
                        (-1.0, 1.0), (margin, margin), False, "pt", sign))
    if agreement is not None:
        kld, top1 = _agreement_values(agreement, seq.kld_clip)
        clip = seq.kld_clip
        out.append(_bet(KLD, f"per-item mean KLD, nats, clipped at {clip:g}", order,
                        {i: [v * clip for v in vs] for i, vs in kld.items()}, q.alpha,
                        (0.0, clip), (q.max_mean_kld, q.max_mean_kld), False, "nats"))
        out.append(_bet(TOP1, "per-item top-1 agreement", order, top1, q.alpha, (0.0, 1.0),
                        (q.min_top1_agreement, q.min_top1_agreement), True, "share"))
    return out


def _show(s: _Series, value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    if s.unit == "log":
        return f"{math.expm1(value):+.1%}"
    if s.unit == "pt":
        return f"{100 * value:+.1f} pt"
    return f"{value:.4g} nats" if s.unit == "nats" else f"{value:.1%}"


def _gate(s: _Series, n_items: int, level: str) -> Gate:
    k, est, low, high = s.at(n_items)
    outcome = s.outcome(n_items)
    decided = _decided_at(s, n_items)
    bounds = f"anytime-valid {level} bounds {_show(s, low)} to {_show(s, high)}"
    limit = (f"passes when the lower bound is at least {_show(s, s.pass_limit)}, fails when "
             f"the upper bound is below {_show(s, s.fail_limit)}" if s.good_above else
             f"passes when the upper bound is at most {_show(s, s.pass_limit)}, fails when "
             f"the lower bound is above {_show(s, s.fail_limit)}")
    if k < s.burn_in:
        bounds = f"{k} items, below the burn-in of {s.burn_in}: no bound yet"
    when = f"; decided after {decided} items" if decided is not None else ""
    evidence = (f"sequential {s.name}: {s.metric}: {_show(s, est)} over {k} items; {bounds} "
                f"({limit}): {outcome}{when}.")
    return Gate(s.name, f"sequential: {s.metric}", _fixed(s, s.pass_limit),
                _fixed(s, est) if math.isfinite(est) else None,
                None if k < s.burn_in else _fixed_ci(s, low, high), outcome, evidence,
                _fixed(s, s.fail_limit))


def _fixed(s: _Series, value: float) -> float:
    """A value in the units of the fixed-N gate of the same name: the speedup (not its
    log), and B - A (not the harm) for the quality gates."""
    return math.expm1(value) if s.unit == "log" else s.sign * value


def _fixed_ci(s: _Series, low: float, high: float) -> tuple[float, float]:
    a, b = _fixed(s, low), _fixed(s, high)
    return (min(a, b), max(a, b))


def _decided_at(s: _Series, n_items: int) -> int | None:
    """The first number of items at which ``s`` was decided (at most ``n_items``)."""
    for n in range(1, n_items + 1):
        if s.outcome(n) != INCONCLUSIVE:
            return n
    return None


def _look(series: Sequence[_Series], n: int) -> str:
    outcomes = [s.outcome(n) for s in series]
    if FAIL in outcomes:
        return "REJECT"
    return "ACCEPT" if all(o == PASS for o in outcomes) else "INCONCLUSIVE"


def _decided_by(series: Sequence[_Series], n: int, decision: str) -> list[str]:
    if decision == "REJECT":
        return [s.name for s in series if s.outcome(n) == FAIL]
    if decision == "ACCEPT":  # the gate(s) that passed last
        times = {s.name: _decided_at(s, n) or 0 for s in series}
        last = max(times.values())
        return [name for name, t in times.items() if t == last]
    return []


def _guarantee(policy: Policy) -> str:
    return (f"each quality and distribution gate errs (passes or fails wrongly) with "
            f"probability at most {policy.quality.alpha:g} per side at any stopping time "
            f"(betting confidence sequences, valid at every sample size); the speed gate "
            f"with probability at most {1 - policy.speed.confidence:.2g} over both sides, "
            f"asymptotically (normal-mixture confidence sequence after "
            f"{policy.sequential.speed_burn_in} items)")


def sequential_section(base: Sequence[SampleLike], cand: Sequence[SampleLike],
                       order: Sequence[str], policy: Policy, *, look_every: int = 1,
                       max_items: int | None = None,
                       agreement: Sequence[AgreementRow | Mapping[str, Any]] | None = None,
                       speed_only: bool = False,
                       arm_names: tuple[str, str] = ("A", "B")) -> Sequential:
    """The sequential evaluation of the first items of ``order`` that both arms ran:
    every look, the stopping look (the first with a decided verdict), the gates there
    (or at the last look), which gate decided and the guarantee."""
    if look_every < 1:
        raise ValueError(f"look_every must be >= 1, got {look_every}")
    pairing = pair_samples(base, cand, arm_names=arm_names, allow_unmatched=True)
    ran = {p.item_id for p in pairing.pairs}
    order = [i for i in order if i in ran] + sorted(ran - set(order))
    series = _series(pairing.pairs, pairing.live, order, agreement, policy, speed_only)
    n_done, cap = len(order), max_items if max_items is not None else len(order)
    marks = sorted({*range(look_every, n_done + 1, look_every),
                    *([n_done] if n_done >= cap else [])})
    looks: list[Look] = []
    stop = None
    for n in marks:
        decision = _look(series, n)
        looks.append(Look(n_items=n, decision=decision))
        if decision != "INCONCLUSIVE":
            stop = n
            break
    at = stop if stop is not None else (marks[-1] if marks else 0)
    decision = _look(series, at) if looks else "INCONCLUSIVE"
    levels = {SPEED: f"{policy.speed.confidence:.0%} two-sided"}
    level = f"one-sided {1 - policy.quality.alpha:.1%}"
    return Sequential(measured=True, look_every=look_every, max_items=cap, n_items_run=n_done,
                      looks=tuple(looks), stopped_at=stop,
                      stopped_early=stop is not None and stop < cap, n_items=at,
                      decision=decision, decided_by=tuple(_decided_by(series, at, decision)),
                      guarantee=_guarantee(policy),
                      gates=tuple(_gate(s, at, levels.get(s.name, level)) for s in series))
