"""Report sections about the whole A/B: headline, setup, matched contract, per-arm
tables and (when recorded) per-arm bench results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from abgate.records.documents import AbRecord
from abgate.records.sections import Distribution, HostInfo, QualitySummary, Section
from abgate.records.side_documents import AbBenchCase, AbBenchDocument
from abgate.report.blocks import Block, Bullets, Heading, Para, Quote, Table
from abgate.report.contract import ContractView
from abgate.report.fmt import (
    NA,
    as_float,
    duration,
    ms,
    num,
    rate,
    short,
    utc,
    value_text,
)
from abgate.report.load import AbData
from abgate.report.review import of_total
from abgate.report.untrusted import user
from abgate.report.views import Gpu, WeightsDiff
from abgate.runner.summary import Summary
from abgate.weights.tables import OUTLIER_REL_L2, kind_ranges, layer_projection_table

SCHEDULES = {"interleave": "interleaved (the arms alternate request by request)",
             "blocks": "blocks (each arm runs a block of requests in turn)"}


def arm_label(data: AbData, arm: str) -> str:
    return f"`{arm}` (baseline)" if arm == data.baseline else f"`{arm}`"


def headline(data: AbData) -> list[Block]:
    exp, analysis = data.record.experiment, data.analysis
    decision = analysis.decision or NA
    blocks: list[Block] = [Heading(1, f"A/B report: {user(exp.name or 'unnamed')}")]
    code = analysis.exit_code
    status = analysis.ab_status or data.record.status or NA
    blocks.append(Para(f"**Decision: {decision}** (exit code {code if code is not None else NA})"
                       f" for {len(data.candidates)} candidate arm(s) against the baseline "
                       f"`{data.baseline}`; the A/B run is **{status}**."))
    items = []
    for arm in data.candidates:
        verdict = data.arm_verdict(arm)
        decision = verdict.decision or NA
        first = verdict.reasons[0] if verdict.reasons else ""
        first = first[len(decision) + 2:] if first.startswith(f"{decision}: ") else first
        if verdict.explanation:  # an INCONCLUSIVE's one line says more than a gate
            first = verdict.explanation.removeprefix(f"{decision} ")
        first = f": {user(first)}" if first else ""
        items.append(f"`{arm}` vs `{data.baseline}`: **{decision}**{first}")
    if items:
        blocks.append(Bullets(tuple(items)))
    return blocks + decision_blocks(data) + description_blocks(exp.description)


def description_blocks(description: str | None) -> list[Block]:
    """The experiment's description, after the verdict and quoted as written: nothing
    in it is read as markup or can look like a line of the report's own."""
    if not description or not description.strip():
        return []
    return [Para("The experiment's description, as written in it (not checked by abgate):"),
            Quote(user(description))]


def decision_blocks(data: AbData) -> list[Block]:
    """The engineer's latest decision (``abgate decide``), and how many came before."""
    if not data.decisions:
        return [Para("No engineer's decision is recorded yet (`abgate decide DIR`).")]
    d = data.decisions[-1]
    src = d.source
    on = f" on `{d.arm}`" if d.arm else ""
    text = (f"**Engineer's decision{on}: {d.decision}** "
            f"({d.relation} the machine verdict {d.machine_verdict or NA}), "
            f"by {user(d.by or 'unnamed')} at {user(d.decided_at)}, for tree "
            f"`{short(src.tree, 40)}` (commit `{short(src.commit, 40)}`"
            f"{', **dirty**' if src.dirty else ''}). Why: {user(d.why)}")
    earlier = len(data.decisions) - 1
    if earlier:
        text += f" ({earlier} earlier decision(s) in `decisions.jsonl`.)"
    return [Para(text)]


def _na(value: Any) -> str:
    return NA if value is None else str(value)


def _gpu_name(gpu: Any) -> str:
    """A GPU as ``host_info`` lists it: an NVML object with its name, else its text."""
    return str(Gpu.model_validate(gpu).name) if isinstance(gpu, Mapping) else str(gpu)


def _host_text(host: HostInfo) -> str:
    ram = host.ram_bytes
    ram_text = f"{ram / 2**30:.1f} GiB RAM" if ram is not None else "RAM n/a"
    gpu_text = ", ".join(_gpu_name(g) for g in host.gpus or []) or "none"
    return (f"`{user(host.hostname or NA)}`: {user(host.cpu or NA)}, "
            f"{_na(host.cores_logical)} logical cores (affinity "
            f"{_na(host.affinity)}), {ram_text}; GPUs: {user(gpu_text)}; "
            f"{user(host.os or NA)}, Python {user(host.python or NA)}")


def _code_text(ab: AbRecord) -> str:
    text = f"abgate {user(ab.abgate_version)}"
    if ab.git is not None:
        text += f", git commit `{short(ab.git.commit)}`"
        if ab.git.dirty:
            text += " **with uncommitted changes** (dirty tree)"
    return text + "."


def _setting(key: str, value: Any) -> str:
    """``key=value``; a table as ``key (k=v, ...)`` without its empty lists."""
    if isinstance(value, Mapping):
        inner = ", ".join(_setting(k, v) for k, v in value.items() if v != [])
        return f"{key} ({inner})"
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def defaults_applied(ab: AbRecord) -> str | None:
    """The resolved settings the as-given experiment leaves out (they were defaults) and
    no other Setup line shows: stopping, expect, evidence. None for an older ab.json."""
    resolved = ab.experiment_resolved
    if resolved is None:
        return None
    given = ab.experiment
    parts = [_setting("stopping", resolved.schedule.stopping)] if (
        resolved.schedule is not None and _written(resolved.schedule, "stopping")
        and not _written(given.schedule, "stopping")) else []
    if _written(resolved, "expect") and not _written(given, "expect"):
        parts.append(_setting("expect", resolved.expect))
    if _written(resolved, "evidence") and not _written(given, "evidence"):
        evidence = resolved.evidence
        parts.append(_setting("evidence", evidence.to_dict() if evidence is not None else None))
    return f"Defaults applied: {user(', '.join(parts))}." if parts else None


def _written(section: Section | None, name: str) -> bool:
    """Whether ``section`` has the optional field ``name`` as recorded (an optional
    section is written only when it was set: ``records.sections.Section``)."""
    return section is not None and name in section.model_fields_set


def _provenance(data: AbData) -> list[str]:
    out = []
    for arm in data.ordered:
        record = data.arms[arm].record
        prov = record.provenance if record is not None else None
        if prov is None:
            continue
        parts = []
        if prov.manifest is not None:
            parts.append(f"manifest digest `{short(prov.manifest.digest, 19)}`")
        if prov.contract is not None:
            parts.append("contract " + ("passed" if prov.contract.passed else "**violated**"))
        if prov.libraries is not None:
            parts.append(f"{len(prov.libraries)} engine process(es) with mapped libraries "
                         "recorded")
        if parts:
            out.append(f"Provenance of `{arm}`: " + "; ".join(parts) + ".")
    return out


def setup(data: AbData) -> list[Block]:
    ab = data.record
    sched = ab.schedule
    started, ended = ab.started_at, ab.ended_at
    elapsed = ended - started if ended is not None else None
    mode = sched.mode
    policy = data.policy  # the policy's own description (compare.policy)
    boot = data.arm_comparison(data.candidates[0]).bootstrap if data.candidates else None
    items = [
        "Arms: " + ", ".join(arm_label(data, a) for a in data.ordered) + ".",
        f"Status **{ab.status or NA}**; started {utc(started)}, ended {utc(ended)} "
        f"({duration(elapsed)}); resumed {len(ab.resumes)} time(s).",
        f"Schedule: {SCHEDULES.get(mode, mode)}; {sched.warmup} warm-up request(s) "
        f"per engine load, not measured; block size {sched.block_size}; "
        f"{len(sched.executed)} measured requests executed.",
        f"Host: {_host_text(ab.host)}.",
        f"Code: {_code_text(ab)}",
        f"Policy: `{user(policy.name if policy else NA)}` "
        f"({user(policy.source if policy else NA)}, sha256 "
        f"{short(policy.sha256 if policy else None)}): "
        f"{user(policy.description if policy else NA)}.",
    ]
    if (applied := defaults_applied(ab)) is not None:
        items.append(applied)
    if boot is not None and boot.model_fields_set:
        items.append(f"Speed intervals: {boot.method or 'bootstrap'}, "
                     f"{_na(boot.n_boot)} resamples, seed {_na(boot.seed)}.")
    if ab.error:
        items.append(f"Recorded error: {value_text(ab.error, 200)}")
    items.extend(_provenance(data))
    return [Heading(2, "Setup", "setup"), Bullets(tuple(items))]


def contract_section(data: AbData, contract: ContractView) -> list[Block]:
    blocks: list[Block] = [
        Heading(2, "Matched contract", "contract"),
        Para("Held equal in every arm (checked before the run: arms may differ only in "
             "engine, model, engine args/options and env):"),
        Table(("What", "Value"), tuple((k, v) for k, v in contract.equal),
              text_cols=frozenset({0, 1})),
    ]
    checks = []
    for arm in data.candidates:
        comp = data.arm_comparison(arm)
        mismatches = comp.diagnostics.prompt_mismatches
        unmatched = comp.n_unmatched.to_json() if "n_unmatched" in comp.model_fields_set \
            else None
        checks.append(f"`{arm}` vs `{data.baseline}`: {_na(comp.n_pairs)} pairs matched "
                      f"by (item, seed); prompt token hashes differ in "
                      f"{_na(mismatches)} of them; unmatched "
                      f"samples {value_text(unmatched)}.")
    if checks:
        blocks.append(Bullets(tuple(checks)))
    blocks.append(Para("What differed between the arms:"))
    if contract.differs:
        header = ("Setting", *(f"`{a}`" for a in data.arms))
        rows = tuple((facet, *values) for facet, values in contract.differs)
        blocks.append(Table(header, rows, text_cols=frozenset(range(len(header)))))
    else:
        blocks.append(Para("**Nothing recorded differs**: this is an A/A comparison."))
    return blocks


def _stats(data: AbData, arm: str) -> Summary:
    """The arm's summary; an arm without samples has an empty one."""
    found = data.arms[arm].stats
    return found if found is not None else Summary.new(n=0, quality=QualitySummary(),
                                                      speed={})


def _quality_row(data: AbData, arm: str) -> tuple[str, ...]:
    stats = _stats(data, arm)
    q = stats.quality
    acc, se = as_float(q.accuracy), as_float(q.accuracy_se)
    se_text = NA if se is None else f"{100 * se:.1f}"
    accuracy = NA if acc is None else f"{100 * acc:.1f}% ± {se_text}"
    accuracy += f" ({of_total(data, arm, 'n_correct', 'n_scored')})"

    def with_count(key: str) -> str:
        return f"{rate(getattr(q, key + '_rate', None))} ({of_total(data, arm, 'n_' + key)})"

    return (arm_label(data, arm), str(stats.n),
            _na(q.n_items), accuracy, with_count("invalid"),
            with_count("truncated"), with_count("natural_stop"),
            _na(q.n_error), num(q.mean_seq_rep_4, ".3f"),
            num(q.mean_output_tokens, ".1f"))


def _speed_row(data: AbData, arm: str) -> tuple[str, ...]:
    speed = _stats(data, arm).speed
    dec, ttft, prefill, tpot = (speed.get(k) or Distribution() for k in (
        "steady_decode_tps", "ttft_s", "prefill_tps", "tpot_ms"))
    return (arm_label(data, arm), num(dec.mean, ".2f"), num(dec.median, ".2f"),
            f"{num(dec.p10, '.2f')} to {num(dec.p90, '.2f')}",
            num(dec.cv, ".2f"), ms(ttft.median), num(prefill.median, ".1f"),
            num(tpot.median, ".1f"))


def arm_tables(data: AbData) -> list[Block]:
    return [
        Heading(2, "Per-arm results", "arms"),
        Para("Quality over each arm's measured samples (engine errors excluded from every "
             "rate). Accuracy ± its standard error in points, clustered by item."),
        Table(("Arm", "Samples", "Items", "Accuracy ± SE (pt) (correct/scored)",
               "Invalid (n/N)", "Truncated (n/N)", "Natural stop (n/N)", "Errors",
               "Mean seq-rep-4", "Mean output tokens"),
              tuple(_quality_row(data, a) for a in data.ordered)),
        Para("Speed per request (request-weighted; decode excludes the first token)."),
        Table(("Arm", "Decode tok/s mean", "Decode tok/s median", "Decode p10 to p90",
               "Decode CV", "TTFT median (ms)", "Prefill tok/s median", "TPOT median (ms)"),
              tuple(_speed_row(data, a) for a in data.ordered)),
    ]


def _bench_cases(bench: AbBenchDocument) -> dict[str, AbBenchCase]:
    """An arm's bench cases by label."""
    return {case.label: case for case in bench.cases}


def bench_section(data: AbData) -> list[Block]:
    """Side-by-side bench cases, when any arm has a ``bench.json``."""
    benches = {a: bench for a in data.ordered if (bench := data.arms[a].bench) is not None}
    if not benches:
        return []
    arms = list(benches)
    per_arm = {a: _bench_cases(bench) for a, bench in benches.items()}
    labels = list(dict.fromkeys(label for cases in per_arm.values() for label in cases))
    header = ["Case (input/output tokens)"]
    for a in arms:
        header += [f"`{a}` decode tok/s", f"`{a}` TTFT ms"]
    rows = []
    for label in labels:
        row = [label]
        for a in arms:
            case = per_arm[a].get(label)
            speed = case.speed if case is not None else None
            decode = speed.steady_decode_tps.median if speed is not None else None
            ttft = speed.of("ttft_s").median if speed is not None else None
            row += [num(decode, ".2f"), ms(ttft)]
        rows.append(tuple(row))
    return [Heading(2, "Bench (fixed-length prompts)", "bench"),
            Para("Medians over the measured repeats of each case, from each arm's "
                 "`bench.json`."),
            Table(tuple(header), tuple(rows))]


def _weights_tables(wd: WeightsDiff) -> list[Block]:
    tensors = wd.tensors
    ranges = kind_ranges(tensors)
    kinds, rows = layer_projection_table(tensors)
    blocks: list[Block] = []
    if ranges:
        blocks += [Para("Relative L2 range per tensor kind (min to max over its tensors):"),
                   Table(("Kind", "Tensors", "Min relative L2", "Max relative L2"),
                         tuple((f"`{k}`", str(n), num(lo, ".3g"), num(hi, ".3g"))
                               for k, n, lo, hi in ranges))]
    if rows:
        blocks += [Para("Relative L2 per layer and projection (`!`: at least "
                        f"{OUTLIER_REL_L2}, beyond any quantization's rounding):"),
                   Table(("Layer", *(f"`{k}`" for k in kinds)),
                         tuple((str(layer), *(_flagged(cells.get(k)) for k in kinds))
                               for layer, cells in rows))]
    return blocks


def _flagged(value: float | None) -> str:
    text = num(value, ".3g")
    return f"{text} !" if value is not None and value >= OUTLIER_REL_L2 else text


def _arm_model_shas(data: AbData) -> set[Any]:
    return {arm.spec.model.sha256 for arm in data.arms.values()
            if arm.spec is not None and arm.spec.model is not None}


def weights_section(data: AbData) -> list[Block]:
    """Weight diagnostics (``weights-diff*.json`` in the A/B directory): reported, never
    deciding under any policy."""
    blocks: list[Block] = []
    arm_shas = _arm_model_shas(data)
    for name, wd in data.weights.items():
        overall, ref, other = wd.summary.overall, wd.ref, wd.other
        stray = [str(s.sha256)[:12] for s in (ref, other) if s.sha256 not in arm_shas]
        if stray:  # a file dropped in that is not about these arms' models: marked, no table
            blocks += [Heading(3, f"Weights: {user(name)} (not this A/B's)", f"weights-{name}"),
                       Para(f"Not shown: model sha256 {user(', '.join(stray))} is no arm's "
                            "model in this A/B, so this diff does not describe its arms.")]
            continue
        blocks += [
            Heading(3, f"Weights: {user(name)}", f"weights-{name}"),
            Para(f"`{user(PurePath(str(ref.path)).name)}` (sha256 {user(str(ref.sha256)[:12])}) vs "
                 f"`{user(PurePath(str(other.path)).name)}` (sha256 "
                 f"{user(str(other.sha256)[:12])}): "
                 f"{wd.summary.n_compared} tensors compared, pooled relative L2 "
                 f"{num(overall.pooled_rel_l2, '.3g')}, pooled SQNR "
                 f"{num(overall.pooled_sqnr_db, '.1f')} dB, worst tensor relative L2 "
                 f"{num(overall.max_rel_l2, '.3g')}."),
            Table(("Tensor", "Relative L2", "SQNR dB"),
                  tuple((f"`{user(t.name)}`", num(t.rel_l2, ".3g"), num(t.sqnr_db, ".1f"))
                        for t in wd.worst(5))),
            *_weights_tables(wd),
        ]
    if not blocks:
        return []
    return [Heading(2, "Weight diagnostics", "weights"),
            Para("Per-tensor error between the checkpoints (`abgate weights-diff`); a "
                 "diagnostic, never a gate."), *blocks]
