"""The figures a reviewer quotes: declared and undeclared differences per candidate,
each arm's contract result and source tree, and the output-health counts (correct n/N,
invalid, truncated, natural stops, U+FFFD, NUL and other control characters apart)."""

from __future__ import annotations

from typing import Any

from abgate.records.sections import ArmDifferences, GitState, HealthCounts, OptOut, Provenance
from abgate.report.blocks import Block, Bullets, Heading, Para, Table
from abgate.report.fmt import NA, short
from abgate.report.load import AbData
from abgate.report.untrusted import user

STAGES = (("request", "before the load"), ("loaded", "after the load"))


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else NA


def counts(data: AbData, arm: str) -> HealthCounts:
    """The arm's output-health counts (``scoring.health.health_counts``)."""
    stats = data.arms[arm].stats
    found = stats.quality.counts if stats is not None else None
    return found if found is not None else HealthCounts()


def of_total(data: AbData, arm: str, key: str, total: str = "n_live") -> str:
    """``n/N`` from an arm's counts."""
    c = counts(data, arm)
    return f"{_count(getattr(c, key, None))}/{_count(getattr(c, total, None))}"


def _difference_rows(entry: ArmDifferences) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for found, label in ((entry.request, "before the load"), (entry.loaded, "after the load")):
        if found is None:
            continue
        for table, text in ((found.declared, "declared"), (found.undeclared, "**undeclared**")):
            for key, values in table.items():
                pair = values if isinstance(values, list) and len(values) == 2 else [NA, NA]
                rows.append((f"`{user(key)}`", label, user(pair[0]), user(pair[1]), text))
    return rows


def differences_section(data: AbData) -> list[Block]:
    """What each candidate changed, declared and undeclared apart (``ab.json``)."""
    recorded = data.record.differences
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
        entry = recorded.get(arm) or ArmDifferences()
        patterns = entry.request.patterns if entry.request else []
        said = (", ".join(f"`{user(p)}`" for p in patterns) if patterns else "nothing")
        head = (f"`{arm}` declares {said}" if entry.declares else
                f"`{arm}`: **nothing is declared**, so no difference was refused")
        if entry.unobserved:
            head += ("; declared but no recorded value differs: "
                     + ", ".join(f"`{user(p)}`" for p in entry.unobserved))
        blocks.append(Para(head + "."))
        blocks.extend(_opt_out_blocks(data, arm, entry.opt_out))
        rows = _difference_rows(entry)
        if rows:
            blocks.append(Table(("Key", "Seen", f"`{data.baseline}`", f"`{arm}`", "Declared"),
                                tuple(rows), text_cols=frozenset(range(5))))
        else:
            blocks.append(Para("No recorded key differs from the baseline."))
    return blocks


def _opt_out_blocks(data: AbData, arm: str, opt: OptOut | None) -> list[Block]:
    """What shows that an env-only difference (an opt-out) took effect, or a warning."""
    if opt is None:
        return []
    env = ", ".join(f"`{user(k)}`" for k in opt.env)
    if opt.warning:
        return [Para(f"**Opt-out evidence: none.** `{arm}` differs from `{data.baseline}` "
                     f"only in {env}; {user(opt.warning)}.")]
    reported = ", ".join(f"`{user(k)}`" for k in opt.reported) or "nothing"
    items = [f"Reported differently after the load: {reported}."]
    for found, name in ((opt.log_lines.baseline, data.baseline),
                        (opt.log_lines.candidate, arm)):
        shown = "; ".join(f"`{user(x)}`" for x in found) or "none"
        items.append(f"Engine log lines matching the declared patterns under `{name}`: "
                     f"{shown}.")
    return [Para(f"**Opt-out evidence.** `{arm}` differs from `{data.baseline}` only in "
                 f"{env}; what shows the variable took effect:"), Bullets(tuple(items))]


def _contract_text(prov: Provenance | None) -> str:
    contract = prov.contract if prov is not None else None
    if contract is None:
        return "no contract"
    name = (contract.contract.name if contract.contract else None) or short(contract.path, 60)
    violations = [user(v.message if v.message is not None else v.clause)
                  for v in contract.violations]
    exempt = [user(v.clause) for v in contract.exempted]
    text = (f"contract `{user(name)}` " + ("passed" if contract.passed else
            "**violated**: " + "; ".join(violations)))
    text += f" (checked: {user(', '.join(map(str, contract.checked)) or 'nothing')})"
    if exempt:
        text += "; exempt as the declared switch: " + ", ".join(f"`{c}`" for c in exempt)
    return text


def _git_cells(git: GitState | None) -> tuple[str, str, str]:
    if git is None:
        return NA, NA, NA
    return (f"`{short(git.commit, 40)}`", f"`{short(git.tree, 40)}`",
            "**yes**" if git.dirty else ("no" if git.dirty is False else NA))


def source_section(data: AbData) -> list[Block]:
    """Each arm's source tree (commit, tree hash, dirty flag) and contract result."""
    rows = []
    for arm in data.ordered:
        run = data.arms[arm].record
        if run is None:
            rows.append((f"`{arm}`", NA, NA, NA, _contract_text(None)))
            continue
        rows.append((f"`{arm}`", *_git_cells(run.git), _contract_text(run.provenance)))
    commit, tree, dirty = _git_cells(data.record.git)
    rows.append(("A/B (ab.json)", commit, tree, dirty, ""))
    return [Heading(2, "Source and contracts", "source"),
            Para("The git commit, tree hash and dirty flag each arm's record was written "
                 "under (`abgate attach` needs every one clean and equal), and each arm's "
                 "contract result."),
            Table(("Arm", "Commit", "Tree", "Dirty", "Contract"), tuple(rows),
                  text_cols=frozenset(range(5)))]


def _chars(c: HealthCounts, chars: str, samples: str | None) -> str:
    text = _count(getattr(c, chars, None))
    found = getattr(c, samples, None) if samples is not None else None
    if found is not None:
        text += f" in {_count(found)} sample(s)"
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
    if any(counts(data, a).nul_chars is None for a in data.ordered):
        notes.append("NUL counts are n/a for samples recorded before abgate counted them.")
    return [Para("Counts behind the rates (engine errors excluded): correct of scored, "
                 "invalid, truncated and natural stops of answered samples; U+FFFD "
                 "replacement characters, NUL and other control characters (tab, newline "
                 "and CR not counted) in the output texts."),
            Table(("Arm", "Correct", "Invalid", "Truncated", "Natural stop", "U+FFFD",
                   "NUL", "Other control"), tuple(rows)),
            *([Bullets(tuple(notes))] if notes else [])]
