"""``abgate decide AB_DIR``: record the engineer's decision beside the machine verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abgate import signals
from abgate.ab.decision import DECISIONS, check_decision, record_decision
from abgate.ab.finish import comparison_current
from abgate.ab.state import AB_FILE
from abgate.cli.finishing import finish_dir
from abgate.cli.typer_app import app
from abgate.cli.verify_cmd import SignKey, check_sign_key, sign_after
from abgate.runner.documents import read_record


@app.command("decide")
def decide_command(
    ab_dir: Annotated[Path, typer.Argument(help="An analysed A/B directory.")],
    decision: Annotated[str, typer.Option("--decision", help=" | ".join(DECISIONS))],
    why: Annotated[str, typer.Option("--why", help="Why: the rule applied, the evidence.")],
    by: Annotated[str | None, typer.Option("--by", help="Who decided.")] = None,
    arm: Annotated[str | None, typer.Option("--arm", help="The candidate arm decided on "
                                            "(default: the A/B's overall verdict).")] = None,
    sign: SignKey = None,
) -> None:
    """Record a decision (keep-default-on, make-opt-in, revert) with why, when, the
    verdict it confirms or overrides and the audited tree; the reports are re-rendered."""
    check_sign_key(sign)
    check_decision(ab_dir, decision, why)
    status = str(read_record(ab_dir / AB_FILE, "ab").status)
    if not comparison_current(ab_dir, status):
        finish_dir(ab_dir)  # the verdict a signal cut short, before deciding on it
    with signals.deferred():  # the decision line, then both reports from it, whole
        doc = record_decision(ab_dir, decision, why, by, arm)
        signals.pause_point("decided")
        finish_dir(ab_dir)
        sign_after(ab_dir, sign)  # after the decision and the re-rendered reports
        src = doc.source
        typer.echo(f"decided {doc.decision} ({doc.relation} the machine verdict "
                   f"{doc.machine_verdict}) for tree {str(src.tree)[:12]} "
                   f"(commit {str(src.commit)[:12]}{', dirty' if src.dirty else ''}); "
                   f"recorded in {ab_dir / 'decisions.jsonl'}")
