"""``abgate decide AB_DIR``: record the engineer's decision beside the machine verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abgate.ab.decision import DECISIONS, record_decision
from abgate.cli.app import app
from abgate.cli.ledger_cmd import index_finished
from abgate.cli.verify_cmd import SignKey, check_sign_key, sign_after
from abgate.report import write_reports


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
    doc = record_decision(ab_dir, decision, why, by, arm)
    write_reports(ab_dir)
    sign_after(ab_dir, sign)  # after the decision and the re-rendered reports
    index_finished(ab_dir)
    src = doc.source
    typer.echo(f"decided {doc.decision} ({doc.relation} the machine verdict "
               f"{doc.machine_verdict}) for tree {str(src.tree)[:12]} "
               f"(commit {str(src.commit)[:12]}{', dirty' if src.dirty else ''}); "
               f"recorded in {ab_dir / 'decisions.jsonl'}")
