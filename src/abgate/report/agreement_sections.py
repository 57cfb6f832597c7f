"""Report sections per candidate arm on direct evidence of numeric damage: distribution
agreement (teacher-forced KL divergence, top-1 agreement, delta-p, the largest-KL
items and positions with both arms' top tokens) and the health probes side by side.

Keys follow ``abgate.compare.agreement`` and ``abgate.compare.probes``; anything
missing prints as ``n/a``, and an old comparison without these sections gets none.
"""

from __future__ import annotations

import json
import math
from typing import Any

from abgate.records.agreement import Agreement
from abgate.records.comparison import Comparison
from abgate.report.blocks import Block, Bullets, Heading, Para, Plot, Table
from abgate.report.fmt import NA, as_float, interval, num, pct, signed_pct
from abgate.report.load import AbData
from abgate.report.untrusted import user

FLOOR = 0.20  # both arms below this accuracy: accuracy cannot see damage
MAX_ROWS = 10


def nats(value: Any) -> str:
    x = as_float(value)
    if x is None:
        return NA
    return "0" if x == 0 else (f"{x:.4f}" if 1e-3 <= abs(x) < 100 else f"{x:.2e}")


def at_floor(data: AbData, arm: str) -> bool:
    """Both arms' accuracy below :data:`FLOOR` (agreement then comes first)."""
    acc = data.arm_comparison(arm).quality.accuracy
    levels = [as_float(side.estimate) for side in (acc.a, acc.b)]
    return all(level is not None and level < FLOOR for level in levels)


def _token(entry: Any) -> str:
    """``[id, logprob(, text)]`` as ``'text' #id 87%`` (``#id 87%`` without text)."""
    if not isinstance(entry, list) or not entry:
        return NA
    logprob = as_float(entry[1]) if len(entry) > 1 else None
    prob = "" if logprob is None else f" {100 * math.exp(logprob):.0f}%"
    text = ""
    if len(entry) > 2 and isinstance(entry[2], str):
        text = "'" + user(json.dumps(entry[2], ensure_ascii=False)[1:-1]) + "' "
    return f"{text}#{entry[0]}{prob}"


def _tops(entries: Any) -> str:
    if not isinstance(entries, list) or not entries:
        return NA
    return ", ".join(_token(e) for e in entries)


def _method_text(section: Agreement) -> str:
    if section.approximate:
        return (f"top-k approximation (k = {_shown(section.k)}): KL over the baseline's "
                "reported tokens plus one remainder bucket, the least any distribution "
                "consistent with the candidate's report gives: a lower bound of the full KL")
    return "full distributions over the vocabulary"


def _shown(value: Any) -> Any:
    return NA if value is None else value


def evidence_line(comparison: Comparison, arm: str) -> str | None:
    """One line of direct evidence for a terminal: mean KLD and top-1 agreement with
    their intervals, and what the scoring pass cost (None when not measured)."""
    section = comparison.agreement
    if section is None or not section.measured:
        return None
    kld, top1 = section.mean_kld, section.top1_agreement
    confidence = 0.95 if kld.confidence is None else kld.confidence
    text = (f"distribution agreement ({section.n_tokens} tokens, "
            f"{section.n_items} items): mean KLD {nats(kld.estimate)} nats "
            f"({pct(confidence, 0)} CI {interval(kld.ci, nats)}), "
            "top-1 agreement "
            f"{pct(top1.estimate, 1)} ({interval(top1.ci, pct)})")
    cost = section.cost.get(arm)
    ratio = None if cost is None else as_float(cost.scoring_over_generation)
    if ratio is not None:
        text += f"; scoring took {ratio:.2f}x this arm's generation time"
    return text + (f"; approximate (top-{section.k}: the KLD is a lower bound)"
                   if section.approximate else "")


def _stats_rows(section: Agreement) -> list[tuple[str, ...]]:
    kld, top1, dp = section.mean_kld, section.top1_agreement, section.delta_p
    kl_pct, dp_pct = section.kl_percentiles, dp.percentiles
    rows: list[tuple[str, ...]] = [
        ("Mean KLD (nats per token)", nats(kld.estimate), interval(kld.ci, nats)),
        ("Top-1 agreement (same most likely token)", pct(top1.estimate, 2),
         interval(top1.ci, lambda v: pct(v, 2))),
        ("Positions with KL exactly 0", pct(section.zero_kl_fraction), "-"),
    ]
    rows += [(f"Per-token KL, {label}", nats(value), "-") for value, label in (
        (kl_pct.median, "median"), (kl_pct.p90, "90th percentile"),
        (kl_pct.p99, "99th percentile"), (kl_pct.p99_9, "99.9th percentile"),
        (kl_pct.max, "maximum"))]
    rows.append(("Mean Δp (p_candidate − p_baseline of the scored token)",
                 signed_pct(dp.mean.estimate, 3),
                 interval(dp.mean.ci, lambda v: signed_pct(v, 3))))
    rows.append(("RMS Δp", pct(dp.rms, 3), "-"))
    rows += [(f"Δp, {label}", signed_pct(value, 2), "-") for value, label in (
        (dp_pct.p01, "1st percentile"), (dp_pct.p05, "5th percentile"),
        (dp_pct.median, "median"), (dp_pct.p95, "95th percentile"),
        (dp_pct.p99, "99th percentile"))]
    return rows


def _cost_text(section: Agreement, arm: str) -> str | None:
    cost = section.cost.get(arm)
    seconds = None if cost is None else as_float(cost.scoring_seconds)
    if cost is None or seconds is None:
        return None
    generation, ratio = (as_float(cost.generation_seconds),
                         as_float(cost.scoring_over_generation))
    text = f"Scoring `{arm}` took {seconds:.1f} s"
    if cost.n_tokens is not None:
        text += f" for {cost.n_tokens} tokens"
    if cost.max_tokens_per_sequence is not None:
        text += f" (the first {cost.max_tokens_per_sequence} of each output)"
    if cost.prompts_restored is not None and cost.n_sequences is not None:
        text += (f"; {cost.prompts_restored} of {cost.n_sequences} prompts restored from "
                 "generation, not prefilled")
    if generation is not None:
        text += f", against {generation:.1f} s of generation"
    if ratio is not None:
        text += f" ({ratio:.2f}× the generation time)"
    return text + "."


def _largest(section: Agreement) -> list[Block]:
    return [
        Para("Items with the largest mean KLD:"),
        Table(("Item", "Tokens", "Mean KLD", "Max KL", "Top-1 agreement"),
              tuple((f"`{_shown(r.item_id)}`", num(r.n_tokens, ".0f"), nats(r.mean_kld),
                     nats(r.max_kl), pct(r.top1_agreement))
                    for r in section.largest_items[:MAX_ROWS])),
        Para("Positions with the largest KL (token IDs; probabilities from each arm's "
             "top tokens):"),
        Table(("Sample", "Position", "KL (nats)", "Scored token", "Δp", "Baseline top tokens",
               "Candidate top tokens"),
              tuple((f"`{_shown(r.key)}`", num(r.position, ".0f"), nats(r.kl),
                     f"#{_shown(r.token)}", signed_pct(r.delta_p, 1),
                     _tops(r.top_base), _tops(r.top_cand))
                    for r in section.largest_positions[:MAX_ROWS]),
              text_cols=frozenset({0, 3, 5, 6})),
    ]


def agreement_blocks(data: AbData, arm: str, plot: Plot | None = None) -> list[Block]:
    """The distribution-agreement section of one candidate (none for old comparisons)."""
    section = data.arm_comparison(arm).agreement
    if section is None:
        return []
    blocks: list[Block] = [Heading(3, "Distribution agreement", f"agreement-{arm}")]
    if not section.measured:
        return [*blocks, Para(f"Not measured: {user(section.reason or 'no reason recorded')}.")]
    if at_floor(data, arm):
        blocks.append(Para(f"Both arms' accuracy is below {FLOOR:.0%}, near the floor of this "
                           "model on this suite: accuracy cannot show damage here, so this "
                           "section comes first."))
    blocks.append(Para(
        f"Both arms scored the same tokens, `{data.baseline}`'s own output "
        f"(teacher-forced): {_shown(section.n_tokens)} positions over "
        f"{_shown(section.n_items)} items ({_shown(section.n_keys)} samples); "
        f"{_method_text(section)}. KL is KL(`{data.baseline}` ‖ `{arm}`) in nats; intervals "
        f"are {pct(section.mean_kld.confidence, 0)} Student-t, clustered by item."))
    blocks.append(Table(("Statistic", "Value", "Interval"), tuple(_stats_rows(section))))
    notes = [text for text in (_cost_text(section, arm),) if text]
    if section.n_nonfinite_kl:
        notes.append(f"{section.n_nonfinite_kl} positions had a non-finite KL, counted "
                     f"as {num(section.kl_cap, 'g')} nats.")
    if section.n_skipped:
        notes.append(f"{section.n_skipped} rows were unusable: "
                     + user("; ".join(section.problems)))
    if notes:
        blocks.append(Bullets(tuple(notes)))
    if plot is not None:
        blocks.append(plot)
    return [*blocks, *_largest(section)]


def probes_blocks(data: AbData, arm: str) -> list[Block]:
    """Both arms' probes side by side (none when no probes ran)."""
    section = data.arm_comparison(arm).probes
    if section is None:
        return []
    blocks: list[Block] = [Heading(3, "Probes", f"probes-{arm}")]
    if not section.measured:
        return [*blocks, Para(f"Not compared: {user(section.reason or 'no reason')}.")]

    def shown(value: bool | None) -> str:
        return NA if value is None else ("pass" if value else "fail")

    rows = tuple((f"`{_shown(r.name)}`", shown(r.baseline), shown(r.candidate),
                  str(_shown(r.status)), r.candidate_reason or r.baseline_reason or "")
                 for r in section.rows)
    return [*blocks, Para("A probe passing under the baseline and failing under the "
                          "candidate fails the verdict; one failing in both decides "
                          "nothing."),
            Table(("Probe", f"`{data.baseline}`", f"`{arm}`", "Status", "Reason"), rows,
                  text_cols=frozenset({0, 1, 2, 3, 4}), badge_cols=frozenset({1, 2}))]
