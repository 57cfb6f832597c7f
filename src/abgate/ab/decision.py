"""The engineer's decision beside the machine's verdict: ``abgate decide AB_DIR``.

A decision (``keep-default-on``, ``make-opt-in`` or ``revert``) is recorded with why,
who, when, the machine verdict it confirms, overrides or settles, and the source tree
every arm of the A/B ran on. Decisions are appended (and fsynced) to
``AB_DIR/decisions.jsonl`` under the directory's writer lock, after a torn last line
is cut (its bytes kept in ``decisions.jsonl.torn``, :mod:`abgate.jsonl_append`): a later
decision supersedes an earlier one, none is lost.
The reports and the ledger show the latest.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.dirlock import exclusive
from abgate.errors import UsageError, did_you_mean
from abgate.jsonl_append import append_line
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.sections import GitState
from abgate.records.side_documents import DecisionRecord
from abgate.redact import redact_text
from abgate.runner import records as rec
from abgate.runner.documents import read_document, read_record
from abgate.safejson import BadJson, parse
from abgate.schema import first_error

DECISIONS_FILE = "decisions.jsonl"
DECISIONS = ("keep-default-on", "make-opt-in", "revert")
# The decision each machine verdict supports.
SUPPORTED = {"ACCEPT": ("keep-default-on",), "REJECT": ("make-opt-in", "revert")}


def relation(decision: str, verdict: str | None) -> str:
    """``confirms`` / ``overrides`` the verdict, or ``settles`` an INCONCLUSIVE one."""
    if verdict not in SUPPORTED:
        return "settles"
    return "confirms" if decision in SUPPORTED[verdict] else "overrides"


def arms_source(out: Path) -> dict[str, Any]:
    """The one source tree (commit, tree, dirty) that ``ab.json`` and every arm's
    ``run.json`` record; arms on different trees, or none recorded, is a UsageError."""
    ab = read_record(out / "ab.json", "ab", model=AbRecord)
    found: dict[str, tuple[Any, Any, Any]] = {"ab.json": _git(ab.git)}
    for arm in ab.experiment.arms:
        path = out / "arms" / arm / rec.RUN_FILE
        if path.exists():
            found[f"arm {arm!r}"] = _git(read_record(path, "ab-arm", model=RunRecord).git)
    if len(set(found.values())) > 1:
        shown = "; ".join(f"{where}: commit {str(g[0])[:12]} tree {str(g[1])[:12]}"
                          f"{' dirty' if g[2] else ''}" for where, g in found.items())
        raise UsageError(f"{out}: the arms ran on different source trees ({shown}); one "
                         "decision cannot apply to all of them")
    commit, tree, dirty = next(iter(found.values()))
    if commit is None:
        raise UsageError(f"{out}: no git commit recorded (the A/B ran outside a git "
                         "checkout); a decision needs the audited tree")
    return {"commit": commit, "tree": tree, "dirty": dirty}


def _git(git: GitState | None) -> tuple[Any, Any, Any]:
    if git is None:
        return None, None, None
    return git.commit, git.tree, git.dirty


def _verdicts(out: Path) -> tuple[str | None, dict[str, Any]]:
    path = out / "comparison.json"
    if not path.exists():
        raise UsageError(f"{out}: no comparison.json; the A/B has not been analysed "
                         "(abgate ab --resume DIR finishes it): there is no verdict to decide on")
    comparison = read_document(path, ComparisonDoc)
    arms = {arm: c.verdict.decision for arm, c in comparison.comparisons.items()}
    return comparison.decision, arms


def check_decision(out: Path, decision: str, why: str) -> None:
    """The checks of a decision that need no verdict (a UsageError, nothing written):
    a known decision, a reason, a finished A/B directory."""
    if decision not in DECISIONS:
        raise UsageError(f"--decision {decision!r} is not one of {', '.join(DECISIONS)}"
                         + did_you_mean(decision, DECISIONS))
    if not why.strip():
        raise UsageError("--why is empty: say why (the rule applied, the evidence read)")
    if not (out / "ab.json").is_file():
        raise UsageError(f"{out}: not an A/B directory (no ab.json)")
    if read_record(out / "ab.json", "ab").status == "running":
        raise UsageError(f"{out}: the A/B is recorded as running (still running, or killed: "
                         "abgate ab --resume DIR finishes it); decide on a finished A/B")


def record_decision(out: Path, decision: str, why: str, by: str | None = None,
                    arm: str | None = None) -> DecisionRecord:
    """Append a decision to ``out/decisions.jsonl`` and return it (as recorded).
    Bad input (an unknown decision, no reason, an unanalysed A/B, arms on different
    trees) is a UsageError with nothing written."""
    check_decision(out, decision, why)
    overall, arms = _verdicts(out)
    if arm is not None and arm not in arms:
        raise UsageError(f"--arm {arm!r} is not a candidate arm of {out}"
                         + did_you_mean(arm, arms))
    verdict = arms[arm] if arm is not None else overall
    try:
        doc = DecisionRecord.model_validate({
            "decision": decision, "why": redact_text(why.strip()),
            "by": redact_text(by) if by else None, "arm": arm, "machine_verdict": verdict,
            "arm_verdicts": arms, "relation": relation(decision, verdict),
            "source": arms_source(out),
            "decided_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    except ValidationError as exc:  # a writer's bug, never a bad line on disk
        raise UsageError(f"decision record: {first_error(exc).message}") from None
    line = json.dumps(doc.model_dump(), sort_keys=True, ensure_ascii=False) + "\n"
    with exclusive(out):  # one writer; a torn last line is cut (kept in .torn) first
        append_line(out / DECISIONS_FILE, line.encode("utf-8"))
    return doc


def read_decisions(out: Path) -> list[DecisionRecord]:
    """Every recorded decision, oldest first (a torn last line, or a line that is not a
    decision record, is skipped)."""
    path = out / DECISIONS_FILE
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            found.append(DecisionRecord.model_validate(parse(line)))
        except (BadJson, ValidationError):
            continue
    return found
