"""CI outputs of an A/B: a JUnit XML file (one testcase per gate; a failed gate carries
the verdict line) and a Markdown summary fit for a pull-request comment or
``$GITHUB_STEP_SUMMARY`` (the verdict, the gates with their counts and intervals, what
differed, the minimum detectable effect). Both read only the A/B's saved records
(``comparison.json``, ``ab.json``); docs/ci.md."""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from abgate.ab.analyze import COMPARISON_FILE
from abgate.ab.state import AB_FILE
from abgate.compare.gates import FAIL, PASS
from abgate.records.comparison import ArmResult, ComparisonDoc
from abgate.records.documents import AbRecord
from abgate.records.result import Gate
from abgate.report.fmt import NA
from abgate.runner.documents import read_document, read_record

# Extra lines under "Minimum detectable effect" (the verdict's own per-gate MDEs,
# ``Verdict.mde``, come first, else comparison.json's ``mde``). Each gets the A/B
# directory and returns Markdown lines; none by default.
MDE_HOOKS: list[Callable[[Path], list[str]]] = []
# values shown as percentages, and differences of rates shown in points
PCT_GATES = ("speed", "top1_agreement", "lossless_outputs", "identical_outputs")
POINT_GATES = ("accuracy", "invalid_rate", "truncated_rate", "error_rate", "repetition")


def load(ab_dir: Path) -> tuple[ComparisonDoc, AbRecord]:
    """The A/B's verdicts and record, or a one-line AbgateError naming the file."""
    return (read_document(ab_dir / COMPARISON_FILE, ComparisonDoc),
            read_record(ab_dir / AB_FILE, "ab", model=AbRecord))


def verdict_line(arm: str, baseline: str, result: ArmResult) -> str:
    """``B vs A: REJECT: <why>`` in one line (the explanation, else the first reason)."""
    v = result.verdict
    why = v.explanation or (v.reasons[0] if v.reasons else "")
    why = why.removeprefix(f"{v.decision}: ").removeprefix(f"{v.decision} ")
    return f"{arm} vs {baseline}: {v.decision}" + (f": {why}" if why else "")


def junit_xml(doc: ComparisonDoc, name: str = "abgate ab") -> str:
    """One ``<testsuite>`` per candidate, one ``<testcase>`` per gate: a failed gate is a
    ``<failure>`` whose message is the verdict line, an inconclusive or unmeasured gate
    ``<skipped>`` (the verdict, INCONCLUSIVE, exits 3 all the same)."""
    root = ET.Element("testsuites", name=name)
    tests = failures = skips = 0  # the totals, over every suite
    for arm, result in doc.comparisons.items():
        gates = result.verdict.gates
        failed = sum(g.outcome == FAIL for g in gates)
        skipped = sum(g.outcome not in (PASS, FAIL) for g in gates)
        suite = ET.SubElement(root, "testsuite", name=f"{name}: {arm} vs {doc.baseline}",
                              tests=str(len(gates)), failures=str(failed), errors="0",
                              skipped=str(skipped))
        line = verdict_line(arm, str(doc.baseline), result)
        for gate in gates:
            case = ET.SubElement(suite, "testcase", name=gate.name,
                                 classname=f"abgate.{arm}")
            if gate.outcome == FAIL:
                ET.SubElement(case, "failure", message=line, type="gate").text = \
                    gate.evidence
            elif gate.outcome != PASS:
                ET.SubElement(case, "skipped", message=f"{gate.outcome}: {gate.evidence}")
            ET.SubElement(case, "system-out").text = gate.evidence
        tests, failures, skips = tests + len(gates), failures + failed, skips + skipped
    root.attrib.update({"tests": str(tests), "failures": str(failures),
                        "skipped": str(skips), "errors": "0"})
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(value: float | None, gate: str) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if gate in POINT_GATES:
        return f"{value * 100:+.1f} pt"
    return f"{value:+.1%}" if gate in PCT_GATES else f"{value:.4g}"


def _ci(gate: Gate) -> str:
    if gate.ci is None:
        return "n/a"
    return f"[{_num(gate.ci[0], gate.name)}, {_num(gate.ci[1], gate.name)}]"


def _counts(gate: Gate, result: ArmResult) -> str:
    c = result.comparison
    if gate.name == "accuracy":
        acc = c.quality.accuracy
        return f"{acc.n_scored} scored; discordant {acc.mcnemar.a_only_correct} vs " \
               f"{acc.mcnemar.b_only_correct}"
    if gate.name == "speed":
        metric = next(iter(c.speed.values()), None)
        return f"{metric.n_items if metric else None} items"
    return f"{c.n_items} items, {c.n_pairs} pairs"


def _gates_table(result: ArmResult) -> list[str]:
    rows = ["| gate | outcome | observed | interval | threshold | counts |",
            "| --- | --- | --- | --- | --- | --- |"]
    for g in result.verdict.gates:
        mark = {"pass": "pass", "fail": "**FAIL**"}.get(g.outcome, g.outcome)
        rows.append(f"| {_cell(g.name)} | {mark} | {_num(g.observed, g.name)} | {_ci(g)} "
                    f"| {_num(g.threshold, g.name)} | {_cell(_counts(g, result))} |")
    return rows


def _apart(a: str, b: str, keep: int = 24) -> tuple[str, str]:
    """Two long values cut to where they differ (a shared head and tail become ...)."""
    if len(a) + len(b) <= 160:
        return a, b
    head = len(os.path.commonprefix([a, b]))
    tail = len(os.path.commonprefix([a[head:][::-1], b[head:][::-1]]))
    start = max(0, head - keep)

    def cut(v: str) -> str:
        end = len(v) - max(0, tail - keep)
        return ("..." if start else "") + v[start:end] + ("..." if end < len(v) else "")

    return cut(a), cut(b)


def _differed(record: AbRecord, arm: str) -> list[str]:
    lines = []
    if record.source is not None:
        s = record.source
        for name, build in s.builds.items():
            how = "cached" if build.cached else f"built in {build.duration_s:.1f} s"
            lines.append(f"- `{name}`: revision `{build.revision}` (commit "
                         f"`{build.commit[:12]}`, tree `{build.tree[:12]}`; {how}; "
                         f"artifacts `{build.artifacts_digest[:12]}`)")
    entry = record.differences.get(arm)
    for when, stage in (("before the load", entry.request), ("loaded", entry.loaded)
                        ) if entry is not None else ():
        if stage is None:
            continue
        for kind, found in (("declared", stage.declared), ("UNDECLARED", stage.undeclared)):
            for key, (a, b) in ((k, (v + ["", ""])[:2]) for k, v in found.items()):
                a, b = _apart(str(a), str(b))
                lines.append(f"- {kind} ({when}): `{_cell(key)}`: {_cell(a)} -> {_cell(b)}")
    return lines or ["- (nothing recorded)"]


def _verdict_mde(result: ArmResult) -> list[str]:
    """The verdict's own MDEs, gate by gate (``Verdict.mde``, abgate.compare.plan)."""
    vm = result.verdict.mde
    if vm is None or not vm.gates:
        return []
    lines = []
    for gate, g in vm.gates.items():
        if g.detectable is None:
            continue
        bound = " (an upper bound: no discordant pair seen)" if g.bound else ""
        lines.append(f"- {_cell(gate)}: detects {g.detectable:.4g} {g.unit or ''} at "
                     f"power {vm.power} with {vm.n_items} items{bound}")
    return lines


def _mde(result: ArmResult, ab_dir: Path) -> list[str]:
    m = result.comparison.mde
    lines = _verdict_mde(result)
    if not lines and m.accuracy_paired is not None:
        lines.append(f"- accuracy (paired, {m.n_items} items, power {m.power}): "
                     f"{m.accuracy_paired * 100:.1f} points")
    if not result.verdict.mde:
        lines += [f"- speed ({metric}): {value:+.1%}" for metric, value in m.speed.items()
                  if value is not None]
    for hook in MDE_HOOKS:
        lines.extend(hook(ab_dir))
    return lines or ["- not stated by this A/B's report"]


def summary_md(ab_dir: Path) -> str:
    """The Markdown summary of the A/B in ``ab_dir``."""
    doc, record = load(ab_dir)
    base = str(doc.baseline)
    out = [f"## abgate: {doc.decision}", ""]
    for arm, result in doc.comparisons.items():
        out += [f"**{_cell(verdict_line(arm, base, result))}**", ""]
        out += [f"- {_cell(r)}" for r in result.verdict.reasons] + [""]
        out += _gates_table(result) + ["", "### What differed", ""]
        out += _differed(record, arm) + ["", "### Minimum detectable effect", ""]
        out += _mde(result, ab_dir) + [""]
    out.append(f"Policy `{doc.policy.name if doc.policy else NA}`; the records: "
               f"`{ab_dir.name}/` (ab.json, "
               "comparison.json).")
    return "\n".join(out) + "\n"
