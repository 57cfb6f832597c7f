"""Report sections per candidate arm: deltas with CIs, the verdict and its gates,
diagnostics; and the per-arm outlier table. Keys follow ``abgate.compare``; any that
are missing print as ``n/a``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from abgate.compare.mde import REACH_FACTOR
from abgate.records.comparison import ArmAccuracy, ChangeRow, Comparison
from abgate.records.result import Gate
from abgate.report.agreement_sections import agreement_blocks, at_floor, nats, probes_blocks
from abgate.report.blocks import Block, Bullets, Heading, Para, Plot, Table
from abgate.report.fmt import NA, as_float, interval, num, pct, pt, signed_pct
from abgate.report.load import AbData
from abgate.report.sections import arm_label
from abgate.report.untrusted import user

SPEED_ROWS = (("steady_decode_tps", "Steady decode tok/s"), ("prefill_tps", "Prefill tok/s"),
              ("ttft_s", "TTFT ms (lower is better)"))
MAX_OUTLIERS = 10


def _rep(value: Any) -> str:
    return num(value, "+.3f")


def _tokens(value: Any) -> str:
    return num(value, ".1f") + ("" if as_float(value) is None else " tokens")


# Gate name -> (format of observed values, how its threshold reads).
GATE_UNITS: dict[str, tuple[Callable[[Any], str], str]] = {
    "sample_size": (lambda v: num(v, ".0f"), ">= {} items"),
    "speed": (signed_pct, "pass above {}"),
    "accuracy": (pt, "drop no worse than {}"),
    "invalid_rate": (pt, "increase at most {}"),
    "truncated_rate": (pt, "increase at most {}"),
    "error_rate": (pt, "increase at most {}"),
    "repetition": (_rep, "increase at most {}"),
    "identical_outputs": (pct, "at least {}"),
    "length_change": (_tokens, "at most {}"),
    "mean_kld": (nats, "upper bound at most {} nats"),
    "top1_agreement": (lambda v: pct(v, 2), "lower bound at least {}"),
    "lossless_outputs": (pct, "divergent at most {}"),
    "lossless_kld": (nats, "at most {} nats"),
}
PROBE_UNITS: tuple[Callable[[Any], str], str] = (
    lambda v: NA if as_float(v) is None else ("passes" if v else "fails"), "must pass")


def _level(value: float | ArmAccuracy | None, kind: str) -> str:
    if isinstance(value, ArmAccuracy):
        value = value.estimate
    return num(value, ".3f") if kind == "rep" else pct(value)


def _quality_rows(comp: Comparison) -> list[tuple[str, ...]]:
    acc, rates = comp.quality.accuracy, comp.quality.rates
    rows: list[tuple[str, ...]] = [
        ("Accuracy", _level(acc.a, "pct"), _level(acc.b, "pct"), pt(acc.diff.estimate),
         interval(acc.diff.ci, pt))]
    for section, label in ((rates.invalid, "Invalid-answer rate"),
                           (rates.truncated, "Truncation rate"),
                           (rates.natural_stop, "Natural-stop rate"),
                           (rates.error, "Engine-error rate")):
        rows.append((label, _level(section.a, "pct"), _level(section.b, "pct"),
                     pt(section.diff.estimate), interval(section.diff.ci, pt)))
    rep = rates.seq_rep_4
    rows.append(("Mean seq-rep-4", _level(rep.a, "rep"), _level(rep.b, "rep"),
                 _rep(rep.diff.estimate), interval(rep.diff.ci, _rep)))
    return rows


def _ratio_change(value: Any) -> str:
    x = as_float(value)
    return NA if x is None else signed_pct(x - 1.0)


def _speed_rows(comp: Comparison) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for key, label in SPEED_ROWS:
        section = comp.speed.get(key)
        if section is None:
            continue
        scale = 1000.0 if key == "ttft_s" else 1.0
        for stat, a, b, change in (
                ("mean", section.a.mean, section.b.mean, section.pct_change_mean),
                ("median", section.a.median, section.b.median, section.pct_change_median)):
            rows.append((f"{label}, {stat}", num(None if a is None else a * scale, ".2f"),
                         num(None if b is None else b * scale, ".2f"),
                         signed_pct(change) + " (plain)", "-"))
        rows.append((f"{label}, per-item ratio", "-", "-",
                     _ratio_change(section.ratio.estimate) + " (geo. mean)",
                     interval(section.ratio.ci, _ratio_change)))
    return rows


def _shown(value: Any) -> Any:
    return NA if value is None else value


def deltas(data: AbData, arm: str) -> list[Block]:
    comp = data.arm_comparison(arm)
    conf = as_float(comp.bootstrap.confidence) or 0.95
    mc = comp.quality.accuracy.mcnemar
    p_value = as_float(mc.p_value)
    return [
        Heading(3, f"Deltas ({arm} − {data.baseline})", f"deltas-{arm}"),
        Para(f"{_shown(comp.n_pairs)} pairs over {_shown(comp.n_items)} items "
             f"({num(comp.pairs_per_item, 'g')} per item); {_shown(comp.n_excluded_errors)} "
             "pairs with an engine error are left out of every statistic but the error rate. "
             "Quality intervals are normal, clustered by item; the plain changes compare the "
             "arms' request-weighted means and medians; the decision uses the geometric mean "
             "of per-item ratios with a bootstrap interval over items."),
        Table(("Metric", f"`{data.baseline}`", f"`{arm}`", "Change",
               f"{conf:.0%} CI of the change"),
              tuple(_quality_rows(comp) + _speed_rows(comp))),
        Para(f"McNemar exact test on accuracy: {_shown(mc.a_only_correct)} pairs right only "
             f"under `{data.baseline}`, {_shown(mc.b_only_correct)} only under `{arm}`, "
             f"p = {NA if p_value is None else f'{p_value:.3g}'}."),
    ]


def _threshold(gate: Gate, show: Callable[[Any], str], text: str) -> str:
    if gate.threshold is None:
        return NA
    out = text.format(show(gate.threshold))
    if gate.fail_threshold is not None:
        out += f", fail below {show(gate.fail_threshold)}"
    return out


def _gate_row(gate: Gate) -> tuple[str, ...]:
    name = gate.name
    default = PROBE_UNITS if name.startswith("probe_") else (lambda v: num(v, ".4g"), "{}")
    show, text = GATE_UNITS.get(name, default)
    more, evidence = gate.more_items_needed, gate.evidence
    if gate.outcome == "inconclusive":
        if gate.out_of_reach:
            evidence += (" (out of reach at this effect size: more than "
                         f"{REACH_FACTOR}× these items)")
        elif more is not None:
            evidence += f" (about {more} more items would settle it)"
    return (f"`{name}`", gate.outcome, show(gate.observed),
            interval(gate.ci, show) if gate.ci is not None else "-",
            _threshold(gate, show, text), user(evidence))


def verdict(data: AbData, arm: str) -> list[Block]:
    v = data.arm_verdict(arm)
    blocks: list[Block] = [
        Heading(3, f"Verdict: {v.decision or NA}", f"verdict-{arm}"),
        *([Para(f"**{user(v.explanation)}**")] if v.explanation else []),
        Bullets(tuple(map(user, v.reasons)) or ("No reasons recorded.",)),
    ]
    if v.gates:
        blocks.append(Para("Every gate, its evidence and its outcome (one-sided bounds for "
                           "quality, two-sided bootstrap CI for speed):"))
        blocks.append(Table(("Gate", "Outcome", "Observed", "Interval", "Threshold",
                             "Evidence"), tuple(_gate_row(g) for g in v.gates),
                            text_cols=frozenset({0, 1, 4, 5}), badge_cols=frozenset({1})))
    else:
        blocks.append(Para("No gates were recorded for this comparison."))
    if v.notes:
        blocks.append(Bullets(tuple(map(user, v.notes))))
    if v.more_samples_needed is not None:
        blocks.append(Para(f"About **{v.more_samples_needed} more samples per arm** would let "
                           "every open gate decide if the effects are as observed."))
    return blocks


def _changes(rows: Sequence[ChangeRow]) -> tuple[str, ...]:
    return tuple(r.text.replace("`", "'") for r in rows if r.text) or ("none",)


def diagnostics(data: AbData, arm: str, plots: Sequence[Plot]) -> list[Block]:
    diag = data.arm_comparison(arm).diagnostics
    same, lengths = diag.identical_outputs, diag.output_tokens
    frac = as_float(same.fraction)
    blocks: list[Block] = [
        Heading(3, "Diagnostics", f"diagnostics-{arm}"),
        Bullets((
            f"Token-identical outputs: **{same.text or NA}** pairs"
            + (f" ({pct(frac)})" if frac is not None else "") + ".",
            f"Output length: mean {num(lengths.a_mean)} tokens under "
            f"`{data.baseline}`, {num(lengths.b_mean)} under `{arm}`; mean change "
            f"{num(lengths.mean_diff, '+.1f')}, mean absolute change "
            f"{num(lengths.mean_abs_diff)} tokens per pair.",
            f"Prompt token-hash mismatches: {_shown(diag.prompt_mismatches)}.",
        )),
        Para("Largest output-length changes:"),
        Bullets(_changes(diag.largest_length_changes)),
        Para("Largest repetition (seq-rep-4) changes:"),
        Bullets(_changes(diag.largest_repetition_changes)),
    ]
    blocks.extend(plots)
    return blocks


def comparison_sections(data: AbData, arm: str, plots: Sequence[Plot],
                        kld_plot: Plot | None = None) -> list[Block]:
    """Everything about one candidate; ``plots`` are its ratio, length, repetition plots.

    Distribution agreement comes before the accuracy deltas when both arms' accuracy
    is near the floor (accuracy cannot show damage there), else after them."""
    ratio, rest = list(plots[:1]), list(plots[1:])
    agreement = agreement_blocks(data, arm, kld_plot)
    accuracy = [*deltas(data, arm), *ratio]
    ordered = [*agreement, *accuracy] if at_floor(data, arm) else [*accuracy, *agreement]
    return [Heading(2, f"{arm} vs {data.baseline}", f"arm-{arm}"), *ordered,
            *verdict(data, arm), *probes_blocks(data, arm), *diagnostics(data, arm, rest)]


def _correct(value: Any) -> str:
    if value is True:
        return "yes"
    return "no" if value is False else "unscored"


def outliers(data: AbData) -> list[Block]:
    rows, notes = [], []
    for arm in data.ordered:
        stats = data.arms[arm].stats
        found = (stats.quality.outliers if stats is not None else None) or []
        for o in found[:MAX_OUTLIERS]:
            key = f"{NA if o.item_id is None else o.item_id}#{NA if o.seed is None else o.seed}"
            rows.append((arm_label(data, arm), f"`{user(key)}`",
                         num(o.output_tokens, ".0f"), num(o.seq_rep_4, ".3f"),
                         _correct(o.correct), user(o.why or "")))
        if len(found) > MAX_OUTLIERS:
            notes.append(f"`{arm}`: {len(found) - MAX_OUTLIERS} more outliers in its "
                         "summary.json.")
    blocks: list[Block] = [
        Heading(2, "Outliers", "outliers"),
        Para("Samples far longer than their arm's median output, or with seq-rep-4 >= 0.4 "
             "(repetition loops), longest first."),
    ]
    if rows:
        blocks.append(Table(("Arm", "Sample", "Output tokens", "seq-rep-4", "Correct", "Why"),
                            tuple(rows), text_cols=frozenset({0, 1, 4, 5})))
    else:
        blocks.append(Para("No outliers in any arm."))
    if notes:
        blocks.append(Bullets(tuple(notes)))
    return blocks
