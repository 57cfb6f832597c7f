"""Report sections per candidate arm on direct evidence of numeric damage: distribution
agreement (teacher-forced KL divergence, top-1 agreement, delta-p, the largest-KL
items and positions with both arms' top tokens) and the health probes side by side.

Keys follow ``abgate.compare.agreement`` and ``abgate.compare.probes``; anything
missing prints as ``n/a``, and an old comparison without these sections gets none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from abgate.report.blocks import Block, Bullets, Heading, Para, Plot, Table
from abgate.report.fmt import NA, as_float, dig, interval, num, pct, signed_pct
from abgate.report.load import AbData

FLOOR = 0.20  # both arms below this accuracy: accuracy cannot see damage
MAX_ROWS = 10
KL_ROWS = (("median", "median"), ("p90", "90th percentile"), ("p99", "99th percentile"),
           ("p99_9", "99.9th percentile"), ("max", "maximum"))
DP_ROWS = (("p01", "1st percentile"), ("p05", "5th percentile"), ("median", "median"),
           ("p95", "95th percentile"), ("p99", "99th percentile"))


def nats(value: Any) -> str:
    x = as_float(value)
    if x is None:
        return NA
    return "0" if x == 0 else (f"{x:.4f}" if 1e-3 <= abs(x) < 100 else f"{x:.2e}")


def at_floor(data: AbData, arm: str) -> bool:
    """Both arms' accuracy below :data:`FLOOR` (agreement then comes first)."""
    acc = dig(data.comparison_of(arm), "quality", "accuracy") or {}
    levels = [as_float(dig(acc, side, "estimate")) for side in ("a", "b")]
    return all(level is not None and level < FLOOR for level in levels)


def _token(entry: Any) -> str:
    """``[id, logprob(, text)]`` as ``'text' #id 87%`` (``#id 87%`` without text)."""
    if not isinstance(entry, list) or not entry:
        return NA
    logprob = as_float(entry[1]) if len(entry) > 1 else None
    prob = "" if logprob is None else f" {100 * math.exp(logprob):.0f}%"
    text = ""
    if len(entry) > 2 and isinstance(entry[2], str):
        text = "'" + json.dumps(entry[2], ensure_ascii=False)[1:-1].replace("`", "'") + "' "
    return f"{text}#{entry[0]}{prob}"


def _tops(entries: Any) -> str:
    if not isinstance(entries, list) or not entries:
        return NA
    return ", ".join(_token(e) for e in entries)


def _method_text(section: Mapping[str, Any]) -> str:
    if section.get("approximate"):
        return (f"top-k approximation (k = {section.get('k', NA)}): KL over the baseline's "
                "reported tokens plus one remainder bucket, the least any distribution "
                "consistent with the candidate's report gives: a lower bound of the full KL")
    return "full distributions over the vocabulary"


def evidence_line(comparison: Mapping[str, Any], arm: str) -> str | None:
    """One line of direct evidence for a terminal: mean KLD and top-1 agreement with
    their intervals, and what the scoring pass cost (None when not measured)."""
    section = comparison.get("agreement")
    if not isinstance(section, Mapping) or not section.get("measured"):
        return None
    kld, top1 = section.get("mean_kld") or {}, section.get("top1_agreement") or {}
    text = (f"distribution agreement ({section.get('n_tokens')} tokens, "
            f"{section.get('n_items')} items): mean KLD {nats(kld.get('estimate'))} nats "
            f"({pct(kld.get('confidence', 0.95), 0)} CI {interval(kld.get('ci'), nats)}), "
            "top-1 agreement "
            f"{pct(top1.get('estimate'), 1)} ({interval(top1.get('ci'), pct)})")
    ratio = as_float(dig(section, "cost", arm, "scoring_over_generation"))
    if ratio is not None:
        text += f"; scoring took {ratio:.2f}x this arm's generation time"
    return text + (f"; approximate (top-{section.get('k')}: the KLD is a lower bound)"
                   if section.get("approximate") else "")


def _stats_rows(section: Mapping[str, Any]) -> list[tuple[str, ...]]:
    kld, top1 = section.get("mean_kld") or {}, section.get("top1_agreement") or {}
    dp = section.get("delta_p") or {}
    rows: list[tuple[str, ...]] = [
        ("Mean KLD (nats per token)", nats(kld.get("estimate")),
         interval(kld.get("ci"), nats)),
        ("Top-1 agreement (same most likely token)", pct(top1.get("estimate"), 2),
         interval(top1.get("ci"), lambda v: pct(v, 2))),
        ("Positions with KL exactly 0", pct(section.get("zero_kl_fraction")), "-"),
    ]
    rows += [(f"Per-token KL, {label}", nats(dig(section, "kl_percentiles", key)), "-")
             for key, label in KL_ROWS]
    rows.append(("Mean Δp (p_candidate − p_baseline of the scored token)",
                 signed_pct(dig(dp, "mean", "estimate"), 3),
                 interval(dig(dp, "mean", "ci"), lambda v: signed_pct(v, 3))))
    rows.append(("RMS Δp", pct(dp.get("rms"), 3), "-"))
    rows += [(f"Δp, {label}", signed_pct(dig(dp, "percentiles", key), 2), "-")
             for key, label in DP_ROWS]
    return rows


def _cost_text(section: Mapping[str, Any], arm: str) -> str | None:
    cost = dig(section, "cost", arm)
    seconds = as_float(dig(cost, "scoring_seconds"))
    if seconds is None:
        return None
    generation, ratio = as_float(dig(cost, "generation_seconds")), as_float(
        dig(cost, "scoring_over_generation"))
    text = f"Scoring `{arm}` took {seconds:.1f} s"
    if as_float(dig(cost, "n_tokens")) is not None:
        text += f" for {dig(cost, 'n_tokens')} tokens"
    if as_float(dig(cost, "max_tokens_per_sequence")) is not None:
        text += f" (the first {dig(cost, 'max_tokens_per_sequence')} of each output)"
    restored, n_seq = dig(cost, "prompts_restored"), dig(cost, "n_sequences")
    if isinstance(restored, int) and isinstance(n_seq, int):
        text += f"; {restored} of {n_seq} prompts restored from generation, not prefilled"
    if generation is not None:
        text += f", against {generation:.1f} s of generation"
    if ratio is not None:
        text += f" ({ratio:.2f}× the generation time)"
    return text + "."


def _largest(section: Mapping[str, Any]) -> list[Block]:
    items = [r for r in section.get("largest_items") or [] if isinstance(r, Mapping)]
    spots = [r for r in section.get("largest_positions") or [] if isinstance(r, Mapping)]
    return [
        Para("Items with the largest mean KLD:"),
        Table(("Item", "Tokens", "Mean KLD", "Max KL", "Top-1 agreement"),
              tuple((f"`{r.get('item_id', NA)}`", num(r.get("n_tokens"), ".0f"),
                     nats(r.get("mean_kld")), nats(r.get("max_kl")),
                     pct(r.get("top1_agreement"))) for r in items[:MAX_ROWS])),
        Para("Positions with the largest KL (token IDs; probabilities from each arm's "
             "top tokens):"),
        Table(("Sample", "Position", "KL (nats)", "Scored token", "Δp", "Baseline top tokens",
               "Candidate top tokens"),
              tuple((f"`{r.get('key', NA)}`", num(r.get("position"), ".0f"), nats(r.get("kl")),
                     f"#{r.get('token', NA)}", signed_pct(r.get("delta_p"), 1),
                     _tops(r.get("top_base")), _tops(r.get("top_cand")))
                    for r in spots[:MAX_ROWS]),
              text_cols=frozenset({0, 3, 5, 6})),
    ]


def agreement_blocks(data: AbData, arm: str, plot: Plot | None = None) -> list[Block]:
    """The distribution-agreement section of one candidate (none for old comparisons)."""
    section = dig(data.comparison_of(arm), "agreement")
    if not isinstance(section, Mapping):
        return []
    blocks: list[Block] = [Heading(3, "Distribution agreement", f"agreement-{arm}")]
    if not section.get("measured"):
        return [*blocks, Para(f"Not measured: {section.get('reason') or 'no reason recorded'}.")]
    if at_floor(data, arm):
        blocks.append(Para(f"Both arms' accuracy is below {FLOOR:.0%}, near the floor of this "
                           "model on this suite: accuracy cannot show damage here, so this "
                           "section comes first."))
    kld = section.get("mean_kld") or {}
    blocks.append(Para(
        f"Both arms scored the same tokens, `{data.baseline}`'s own output "
        f"(teacher-forced): {section.get('n_tokens', NA)} positions over "
        f"{section.get('n_items', NA)} items ({section.get('n_keys', NA)} samples); "
        f"{_method_text(section)}. KL is KL(`{data.baseline}` ‖ `{arm}`) in nats; intervals "
        f"are {pct(kld.get('confidence'), 0)} Student-t, clustered by item."))
    blocks.append(Table(("Statistic", "Value", "Interval"), tuple(_stats_rows(section))))
    notes = [text for text in (_cost_text(section, arm),) if text]
    if section.get("n_nonfinite_kl"):
        notes.append(f"{section['n_nonfinite_kl']} positions had a non-finite KL, counted "
                     f"as {num(section.get('kl_cap'), 'g')} nats.")
    if section.get("n_skipped"):
        notes.append(f"{section['n_skipped']} rows were unusable: "
                     + "; ".join(str(p) for p in section.get("problems") or []))
    if notes:
        blocks.append(Bullets(tuple(notes)))
    if plot is not None:
        blocks.append(plot)
    return [*blocks, *_largest(section)]


def probes_blocks(data: AbData, arm: str) -> list[Block]:
    """Both arms' probes side by side (none when no probes ran)."""
    section = dig(data.comparison_of(arm), "probes")
    if not isinstance(section, Mapping):
        return []
    blocks: list[Block] = [Heading(3, "Probes", f"probes-{arm}")]
    if not section.get("measured"):
        return [*blocks, Para(f"Not compared: {section.get('reason') or 'no reason'}.")]

    def shown(value: Any) -> str:
        return NA if value is None else ("pass" if value else "fail")

    rows = tuple((f"`{r.get('name', NA)}`", shown(r.get("baseline")), shown(r.get("candidate")),
                  str(r.get("status", NA)),
                  str(r.get("candidate_reason") or r.get("baseline_reason") or ""))
                 for r in section.get("rows") or [] if isinstance(r, Mapping))
    return [*blocks, Para("A probe passing under the baseline and failing under the "
                          "candidate fails the verdict; one failing in both decides "
                          "nothing."),
            Table(("Probe", f"`{data.baseline}`", f"`{arm}`", "Status", "Reason"), rows,
                  text_cols=frozenset({0, 1, 2, 3, 4}), badge_cols=frozenset({1, 2}))]
