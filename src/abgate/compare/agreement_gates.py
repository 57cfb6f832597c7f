"""Gates on direct evidence of numeric damage: distribution agreement, lossless
switches and health probes. They read the ``agreement``, ``probes`` and ``expect``
entries that :mod:`abgate.ab.analyze` adds to a comparison; when those are absent
(old A/B directories, engines that cannot score) the gates are absent and
:func:`evidence_notes` says why.

- ``mean_kld``: a one-sided Student-t bound (items - 1 degrees of freedom) at
  ``quality.alpha`` of the clustered mean KLD: upper bound <= ``max_mean_kld`` passes,
  lower bound > it fails, else inconclusive;
- ``top1_agreement``: lower bound >= ``min_top1_agreement`` passes, upper bound below
  it fails, else inconclusive;
- with ``expect = "lossless"``: ``lossless_outputs`` (share of pairs whose output
  tokens differ <= ``lossless.max_divergent_fraction``) and ``lossless_kld`` (mean KLD
  <= ``lossless.max_mean_kld``), plain comparisons that pass or fail;
- ``probe_<name>``: fails when the probe passes in the baseline and fails in the
  candidate, passes when it passes in both.
"""

from __future__ import annotations

from abgate.compare.gates import FAIL, INCONCLUSIVE, PASS, Gate, more_items
from abgate.compare.policy import Policy
from abgate.compare.probes import BOTH_FAIL, BOTH_PASS, REGRESSION
from abgate.compare.stats import t_quantile
from abgate.records.agreement import Agreement, RatioStat
from abgate.records.comparison import Comparison, Probes

__all__ = ["agreement_gates", "evidence_notes", "lossless_gates", "measured_agreement",
           "measured_probes", "probe_gates"]

LOSSLESS = "lossless"


def measured_agreement(comparison: Comparison) -> Agreement | None:
    """The ``agreement`` section when it was measured, else None."""
    section = comparison.agreement
    return section if section is not None and section.measured else None


def measured_probes(comparison: Comparison) -> Probes | None:
    """The ``probes`` section when probes were compared, else None."""
    section = comparison.probes
    return section if section is not None and section.measured else None


def _context(section: Agreement) -> str:
    text = f"{section.n_tokens} tokens over {section.n_items} items"
    if section.approximate:
        text += (f"; top-k approximation (k={section.k}), a lower bound of the full "
                 "KL, so a pass is approximate")
    return text


def _bounded(name: str, metric: str, stat: RatioStat, limit: float, upper: bool,
             alpha: float, power: float, n_items: int, words: tuple[str, str, str]) -> Gate:
    """A gate on a clustered ratio: harm is above ``limit`` (``upper``) or below it."""
    estimate, se, df = stat.estimate, stat.se, stat.df
    what, show, context = words
    if estimate is None or se is None or df is None:
        return Gate(name, metric, limit, estimate, None, INCONCLUSIVE,
                    f"{what} {show.format(estimate) if estimate is not None else 'n/a'} "
                    f"({context}): too few items for an interval.")
    t = t_quantile(1.0 - alpha, int(df))
    low, high = estimate - t * se, estimate + t * se
    pass_bound, fail_bound = (high, low) if upper else (low, high)
    side = ("upper", "lower") if upper else ("lower", "upper")
    allowed = f"the {'allowed' if upper else 'required'} {show.format(limit)}"
    level = f"one-sided {1 - alpha:.1%}"
    more, far = None, False
    if (pass_bound <= limit) if upper else (pass_bound >= limit):
        outcome = PASS
        clause = (f"{level} {side[0]} bound {show.format(pass_bound)} "
                  f"{'is within' if upper else 'meets'} {allowed}")
    elif (fail_bound > limit) if upper else (fail_bound < limit):
        outcome = FAIL
        clause = (f"{level} {side[1]} bound {show.format(fail_bound)} "
                  f"{'exceeds' if upper else 'is below'} {allowed}")
    else:
        outcome = INCONCLUSIVE
        clause = (f"{level} {side[0]} bound {show.format(pass_bound)} cannot rule out "
                  f"{'exceeding' if upper else 'falling below'} {allowed}")
        more, far = more_items(se, n_items, abs(estimate - limit), t, power)
    return Gate(name, metric, limit, estimate, (max(0.0, low), high if upper else min(1.0, high)),
                outcome, f"{what} {show.format(estimate)} ({context}); {clause}.",
                more_items_needed=more, out_of_reach=far)


def agreement_gates(comparison: Comparison, policy: Policy) -> list[Gate]:
    """``mean_kld`` and ``top1_agreement``, when agreement was measured."""
    section = measured_agreement(comparison)
    if section is None:
        return []
    rule, n_items, context = policy.quality, int(section.n_items or 0), _context(section)
    return [
        _bounded("mean_kld", "mean KL(baseline || candidate) per token, nats, teacher-forced "
                 "on the baseline's output (clustered by item)", section.mean_kld,
                 rule.max_mean_kld, True, rule.alpha, policy.power, n_items,
                 ("mean KLD", "{:.4g} nats", context)),
        _bounded("top1_agreement", "share of positions where both arms' most likely token "
                 "is the same (clustered by item)", section.top1_agreement,
                 rule.min_top1_agreement, False, rule.alpha, policy.power, n_items,
                 ("top-1 agreement", "{:.2%}", context)),
    ]


def _outputs_gate(comparison: Comparison, limit: float) -> Gate:
    same = comparison.diagnostics.identical_outputs
    n, of = int(same.n or 0), int(same.of or 0)
    metric = "share of paired samples whose output tokens differ (expect = lossless)"
    if not of:
        return Gate("lossless_outputs", metric, limit, None, None, INCONCLUSIVE,
                    "expect = lossless, but no pair recorded output token IDs or hashes.")
    divergent = (of - n) / of
    ok = divergent <= limit
    return Gate("lossless_outputs", metric, limit, divergent, None, PASS if ok else FAIL,
                f"expect = lossless: {of - n} of {of} paired samples have different output "
                f"tokens ({divergent:.1%}); the policy allows at most {limit:.1%}.")


def lossless_gates(comparison: Comparison, policy: Policy) -> list[Gate]:
    """With ``expect = "lossless"``: output identity and KLD at the noise level."""
    if comparison.expect != LOSSLESS:
        return []
    rule = policy.lossless
    gates = [_outputs_gate(comparison, rule.max_divergent_fraction)]
    section = measured_agreement(comparison)
    estimate = None if section is None else section.mean_kld.estimate
    if section is not None and estimate is not None:
        ok = estimate <= rule.max_mean_kld
        gates.append(Gate(
            "lossless_kld", "mean KLD per token, nats (expect = lossless)", rule.max_mean_kld,
            estimate, None, PASS if ok else FAIL,
            f"expect = lossless: mean KLD {estimate:.3g} nats per token ({_context(section)}) "
            f"{'is within' if ok else 'is above'} the numerical-noise level "
            f"{rule.max_mean_kld:g}."))
    return gates


def probe_gates(comparison: Comparison) -> list[Gate]:
    """A failing gate per probe that regressed; a passing one per probe passing in both."""
    section = measured_probes(comparison)
    if section is None:
        return []
    arms, gates = comparison.arms, []
    for row in section.rows:
        name, status = str(row.name), row.status
        metric = f"probe {name} passes (baseline passes it)"
        if status == REGRESSION:
            gates.append(Gate(f"probe_{name}", metric, 1.0, 0.0, None, FAIL,
                              f"probe {name} passes under {arms.a} but fails under "
                              f"{arms.b}: {row.candidate_reason or 'no reason'}."))
        elif status == BOTH_PASS:
            gates.append(Gate(f"probe_{name}", metric, 1.0, 1.0, None, PASS,
                              f"probe {name} passes under both {arms.a} and {arms.b}."))
    return gates


def evidence_notes(comparison: Comparison) -> list[str]:
    """Sentences about evidence that was not measured or decides nothing."""
    notes = []
    agreement = comparison.agreement
    if agreement is not None and not agreement.measured:
        notes.append("Distribution agreement not measured: "
                     f"{agreement.reason or 'no reason recorded'}; its gates are absent.")
    probes = comparison.probes
    if probes is not None and not probes.measured:
        notes.append(f"Probes not compared: {probes.reason or 'no reason recorded'}.")
    elif probes is not None:
        both = [str(r.name) for r in probes.rows if r.status == BOTH_FAIL]
        if both:
            notes.append("Probes failing in both arms (reported, not held against the "
                         "candidate): " + ", ".join(both) + ".")
    return notes
