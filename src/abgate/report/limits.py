""""What this evidence does not certify": the limits a reviewer should keep in mind,
computed from the recorded sample size, MDEs, host, suite and sampling."""

from __future__ import annotations

from typing import Any

from abgate.compare.views import views
from abgate.records.comparison import Comparison
from abgate.records.sections import Distribution, Spec, SuiteRef
from abgate.report.blocks import Block, Bullets, Heading, Para
from abgate.report.fmt import NA, as_float, pct, value_text
from abgate.report.load import AbData
from abgate.report.plots import SPEED_LABELS
from abgate.report.untrusted import user
from abgate.report.views import ArmSetting, Gpu

NOISY_CV = 0.25  # decode-speed coefficient of variation that suggests a busy host
MANY_TRUNCATED = 0.10
DECODE = "steady_decode_tps"


def _points(value: Any) -> str:
    x = as_float(value)
    return NA if x is None else f"{100.0 * abs(x):.1f}"


def _accuracy_limits(comp: Comparison, arm: str, baseline: str) -> list[str]:
    mde = comp.mde
    conf, power = as_float(mde.confidence), as_float(mde.power)
    level = f"{pct(conf, 0)} confidence, {pct(power, 0)} power" if conf and power else "the MDE"
    n_items = NA if comp.n_items is None else comp.n_items
    paired = as_float(mde.accuracy_paired)
    if paired:
        out = [f"`{arm}` vs `{baseline}`: an accuracy regression smaller than "
               f"**{_points(paired)} points** cannot be excluded at this sample size "
               f"({n_items} items; paired minimum detectable effect at {level})."]
    else:  # no discordant pairs: the SE, and so the MDE, is 0 and says nothing
        out = [f"`{arm}` vs `{baseline}`: no pair changed correctness, so the accuracy "
               f"MDE is not informative; a regression affecting up to "
               f"**{_points(mde.discordance_upper)} points** of pairs cannot be "
               f"excluded at this sample size ({n_items} items; upper {pct(conf, 0)} bound "
               "of the discordant share)."]
    ci = comp.quality.accuracy.diff.ci
    low = as_float(ci[0]) if ci is not None else None
    if low is not None and low < 0:
        out.append(f"`{arm}`: the interval of the accuracy change reaches "
                   f"{100 * low:+.1f} points; a drop that large is consistent with the data.")
    return out


def _mde_text(name: str, value: float | None, unit: str | None) -> str:
    if value is None:
        return f"{name} n/a"
    if unit and ("fraction" in unit or "agreement" in unit):
        return f"{name} {100 * value:.1f}%"
    return f"{name} {value:.3g}"


def verdict_mde_line(data: AbData, arm: str) -> list[str]:
    """The MDE the verdict had: the true effect each gate fails with the policy's power
    at this run's size (``verdict.mde``, abgate.compare.plan)."""
    mde = data.arm_verdict(arm).mde
    if mde is None or not mde.gates:
        return []
    parts = [_mde_text(name, g.detectable, g.unit) + (" (bounded)" if g.bound else "")
             for name, g in mde.gates.items()]
    return [f"`{arm}`: the MDE this verdict had ({mde.n_items} items, "
            f"{pct(mde.power, 0)} power; the true effect at which each gate fails): "
            + ", ".join(parts) + "."]


def _arm_limits(data: AbData, arm: str) -> list[str]:
    comp, policy = data.arm_comparison(arm), data.policy
    out = _accuracy_limits(comp, arm, data.baseline) + verdict_mde_line(data, arm)
    metric = policy.speed.metric if policy else "steady_decode_tps"
    speed_mde = as_float(comp.mde.speed.get(metric))
    if speed_mde is not None:
        size = 100 * abs(speed_mde)
        out.append(f"`{arm}`: a true {SPEED_LABELS.get(metric, metric)} change smaller than "
                   f"about {size:.{1 if size >= 1 else 2}f}% would likely go undetected "
                   "(minimum detectable effect).")
    margin = policy.quality.max_accuracy_drop if policy else None
    if margin is not None:
        out.append(f"`{arm}`: a passing accuracy gate shows non-inferiority within "
                   f"{100 * margin:.1f} points, not equality.")
    same = comp.diagnostics.identical_outputs
    if same.fraction == 1:
        out.append(f"`{arm}`: every output was token-identical here; other prompts, "
                   "lengths or batch sizes may still diverge.")
    elif same.text:
        out.append(f"`{arm}`: only {same.text} outputs were token-identical, so the change "
                   "is not lossless even where the answers agree.")
    return out + _agreement_limits(data, arm)


def _agreement_limits(data: AbData, arm: str) -> list[str]:
    agreement = data.arm_comparison(arm).agreement
    if agreement is None:
        return []
    if not agreement.measured:
        return [f"`{arm}`: distribution agreement (KL divergence) was not measured, so "
                "numeric damage that accuracy cannot see is not excluded."]
    out = [f"`{arm}`: distribution agreement was measured teacher-forced on "
           f"`{data.baseline}`'s outputs for these prompts only; how far the candidate's "
           "own generations drift after a first different token is seen only through the "
           "output diagnostics."]
    if agreement.approximate:
        k = NA if agreement.k is None else agreement.k
        out.append(f"`{arm}`: KL was computed over the top-{k} tokens "
                   "plus a remainder bucket, a lower bound of the full KL: divergence in the "
                   "tail of the distribution is not measured.")
    return out


def _host(data: AbData) -> str:
    host = data.record.host
    device = user(", ".join(str(gpu.name) for gpu in views(Gpu, host.gpus)))
    hostname, cpu = (NA if v is None else v for v in (host.hostname, host.cpu))
    return (f"One machine: `{user(hostname)}` ({user(cpu)}"
            f"{'; ' + device if host.gpus else ', no GPU'}). Speed on other hardware, drivers, "
            "engine builds or under other load is not measured.")


def _suite(data: AbData) -> str:
    spec = data.arms[data.baseline].spec or Spec()
    config = data.arm_config(data.baseline)
    suite_ref = spec.suite or SuiteRef()
    suite = suite_ref.name or config.suite or NA
    ids = spec.item_ids
    n_items = len(ids) if ids is not None else (
        config.limit if "limit" in config.model_fields_set else NA)  # absent: not known
    available = suite_ref.n_available
    of = f" of {available}" if available is not None else ""
    seeds = spec.seeds if spec.seeds is not None else config.seeds
    return (f"One suite: {user(suite)}, {user(n_items)}{of} items, seeds "
            f"{value_text(seeds)}. Other tasks, prompt formats, languages and long contexts "
            "are not covered.")


def _sampling(data: AbData) -> list[str]:
    spec = data.arms[data.baseline].spec
    setting = ArmSetting.model_validate((spec.sampling if spec is not None else None)
                                        or data.arm_config(data.baseline))
    temp, max_tokens = setting.temperature, setting.max_tokens
    out = [f"One sampling setting: temperature {value_text(temp)}, at most "
           f"{value_text(max_tokens)} output tokens."]
    worst = max((as_float(data.arms[a].quality("truncated_rate")) or 0.0
                 for a in data.ordered), default=0.0)
    if worst >= MANY_TRUNCATED:
        out.append(f"Up to {pct(worst)} of outputs hit the token limit: quality of longer "
                   "answers is not measured.")
    return out


def _decode(data: AbData, arm: str) -> Distribution:
    """The arm's decode-speed distribution (empty when not recorded)."""
    stats = data.arms[arm].stats
    return (stats.speed.get(DECODE) if stats is not None else None) or Distribution()


def _noise(data: AbData) -> list[str]:
    cvs = [(as_float(_decode(data, a).cv), a) for a in data.ordered]
    noisy = [(cv, a) for cv, a in cvs if cv is not None and cv > NOISY_CV]
    if not noisy:
        return []
    cv, arm = max(noisy)
    return [f"Decode speed varied a lot within an arm (CV {cv:.2f} in `{arm}`): the host may "
            "have been busy; trust speed numbers only after a quiet re-run."]


def not_certified(data: AbData) -> list[Block]:
    items: list[str] = []
    for arm in data.candidates:
        items.extend(_arm_limits(data, arm))
    status = data.record.status
    if status != "complete":
        items.append(f"The A/B is **{status}**, not complete: results cover only the samples "
                     "recorded, and an ACCEPT is never given on an unfinished run.")
    items += [_host(data), *_noise(data), _suite(data), *_sampling(data),
              "Requests ran one at a time: throughput and latency under concurrent load "
              "(batching) are not measured.",
              "Only the recorded configuration is covered: the listed engine args, env and "
              "effective configuration, on the recorded model file."]
    return [Heading(2, "What this evidence does not certify", "limits"),
            Para("This A/B does not certify:"), Bullets(tuple(items))]
