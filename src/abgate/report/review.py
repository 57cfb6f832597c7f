"""The figures a reviewer quotes: declared and undeclared differences per candidate,
each arm's contract result and source tree, and the output-health counts (correct n/N,
invalid, truncated, natural stops, U+FFFD, NUL and other control characters apart)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abgate.report.blocks import Block, Bullets, Heading, Para, Table
from abgate.report.fmt import NA, dig, mapping, short
from abgate.report.load import AbData

STAGES = (("request", "before the load"), ("loaded", "after the load"))


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else NA


def counts(data: AbData, arm: str) -> Mapping[str, Any]:
    return mapping(dig(data.arms[arm].summary, "quality", "counts"))


def of_total(data: AbData, arm: str, key: str, total: str = "n_live") -> str:
    """``n/N`` from an arm's counts."""
    c = counts(data, arm)
    return f"{_count(c.get(key))}/{_count(c.get(total))}"


def _difference_rows(entry: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for stage, label in STAGES:
        found = mapping(entry.get(stage))
        for kind, text in (("declared", "declared"), ("undeclared", "**undeclared**")):
            for key, values in mapping(found.get(kind)).items():
                pair = values if isinstance(values, list) and len(values) == 2 else [NA, NA]
                rows.append((f"`{key}`", label, str(pair[0]), str(pair[1]), text))
    return rows


def differences_section(data: AbData) -> list[Block]:
    """What each candidate changed, declared and undeclared apart (``ab.json``)."""
    recorded = mapping(data.ab.get("differences"))
    if not recorded:
        return []
    blocks: list[Block] = [
        Heading(2, "Declared differences", "declared"),
        Para("Every recorded key that differs from the baseline: requested engine args, "
             "engine options, env, model and engine before the load; engine version, "
             "effective configuration and mapped libraries after it. Once an experiment "
             "declares its switch (`changes = [...]`, `allow_differences`), an undeclared "
             "difference is refused before the load or stops the A/B after it."),
    ]
    for arm in data.candidates:
        entry = mapping(recorded.get(arm))
        patterns = mapping(entry.get("request")).get("patterns") or []
        declares = entry.get("declares")
        said = (", ".join(f"`{p}`" for p in patterns) if patterns else "nothing")
        head = (f"`{arm}` declares {said}" if declares else
                f"`{arm}`: **nothing is declared**, so no difference was refused")
        unobserved = entry.get("unobserved") or []
        if unobserved:
            head += ("; declared but no recorded value differs: "
                     + ", ".join(f"`{p}`" for p in unobserved))
        blocks.append(Para(head + "."))
        blocks.extend(_opt_out_blocks(data, arm, mapping(entry.get("opt_out"))))
        rows = _difference_rows(entry)
        if rows:
            blocks.append(Table(("Key", "Seen", f"`{data.baseline}`", f"`{arm}`", "Declared"),
                                tuple(rows), text_cols=frozenset(range(5))))
        else:
            blocks.append(Para("No recorded key differs from the baseline."))
    return blocks


def _opt_out_blocks(data: AbData, arm: str, opt: Mapping[str, Any]) -> list[Block]:
    """What shows that an env-only difference (an opt-out) took effect, or a warning."""
    if not opt:
        return []
    env = ", ".join(f"`{k}`" for k in opt.get("env") or [])
    if opt.get("warning"):
        return [Para(f"**Opt-out evidence: none.** `{arm}` differs from `{data.baseline}` "
                     f"only in {env}; {opt['warning']}.")]
    reported = ", ".join(f"`{k}`" for k in opt.get("reported") or []) or "nothing"
    lines = mapping(opt.get("log_lines"))
    items = [f"Reported differently after the load: {reported}."]
    for side, name in (("baseline", data.baseline), ("candidate", arm)):
        found = lines.get(side) or []
        shown = "; ".join(f"`{str(x).replace('`', chr(39))}`" for x in found) or "none"
        items.append(f"Engine log lines matching the declared patterns under `{name}`: "
                     f"{shown}.")
    return [Para(f"**Opt-out evidence.** `{arm}` differs from `{data.baseline}` only in "
                 f"{env}; what shows the variable took effect:"), Bullets(tuple(items))]


def _contract_text(prov: Mapping[str, Any]) -> str:
    contract = prov.get("contract")
    if not isinstance(contract, Mapping):
        return "no contract"
    name = dig(contract, "contract", "name") or short(contract.get("path"), 60)
    violations = [str(v.get("message", v.get("clause"))) for v in contract.get("violations")
                  or [] if isinstance(v, Mapping)]
    exempt = [str(v.get("clause")) for v in contract.get("exempted") or []
              if isinstance(v, Mapping)]
    text = (f"contract `{name}` " + ("passed" if contract.get("passed") else
            "**violated**: " + "; ".join(violations)))
    checked = contract.get("checked") or []
    text += f" (checked: {', '.join(map(str, checked)) or 'nothing'})"
    if exempt:
        text += "; exempt as the declared switch: " + ", ".join(f"`{c}`" for c in exempt)
    return text


def _git_cells(git: Any) -> tuple[str, str, str]:
    if not isinstance(git, Mapping):
        return NA, NA, NA
    dirty = git.get("dirty")
    return (f"`{short(git.get('commit'), 40)}`", f"`{short(git.get('tree'), 40)}`",
            "**yes**" if dirty else ("no" if dirty is False else NA))


def source_section(data: AbData) -> list[Block]:
    """Each arm's source tree (commit, tree hash, dirty flag) and contract result."""
    rows = []
    for arm in data.ordered:
        run = data.arms[arm].run
        prov = mapping(run.get("provenance"))
        rows.append((f"`{arm}`", *_git_cells(run.get("git")), _contract_text(prov)))
    commit, tree, dirty = _git_cells(data.ab.get("git"))
    rows.append(("A/B (ab.json)", commit, tree, dirty, ""))
    return [Heading(2, "Source and contracts", "source"),
            Para("The git commit, tree hash and dirty flag each arm's record was written "
                 "under (`abgate attach` needs every one clean and equal), and each arm's "
                 "contract result."),
            Table(("Arm", "Commit", "Tree", "Dirty", "Contract"), tuple(rows),
                  text_cols=frozenset(range(5)))]


def _chars(c: Mapping[str, Any], chars: str, samples: str | None) -> str:
    text = _count(c.get(chars))
    if samples is not None and c.get(samples) is not None:
        text += f" in {_count(c.get(samples))} sample(s)"
    return text


def health_counts_section(data: AbData) -> list[Block]:
    rows = []
    for arm in data.ordered:
        c = counts(data, arm)
        rows.append((f"`{arm}`", of_total(data, arm, "n_correct", "n_scored"),
                     of_total(data, arm, "n_invalid"), of_total(data, arm, "n_truncated"),
                     of_total(data, arm, "n_natural_stop"),
                     _chars(c, "replacement_chars", "n_with_replacement_chars"),
                     _chars(c, "nul_chars", "n_with_nul_chars"),
                     _chars(c, "other_control_chars", None)))
    notes = []
    if any(counts(data, a).get("nul_chars") is None for a in data.ordered):
        notes.append("NUL counts are n/a for samples recorded before abgate counted them.")
    return [Para("Counts behind the rates (engine errors excluded): correct of scored, "
                 "invalid, truncated and natural stops of answered samples; U+FFFD "
                 "replacement characters, NUL and other control characters (tab, newline "
                 "and CR not counted) in the output texts."),
            Table(("Arm", "Correct", "Invalid", "Truncated", "Natural stop", "U+FFFD",
                   "NUL", "Other control"), tuple(rows)),
            *([Bullets(tuple(notes))] if notes else [])]
