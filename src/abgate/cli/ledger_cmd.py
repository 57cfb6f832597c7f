"""``abgate ledger add|ls|check|forget``, ``abgate history METRIC`` and ``abgate compare
A B``: thin commands over :mod:`abgate.ledger`; ``index_finished`` is the hook the run,
A/B, bench and baseline commands call when they finish."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from abgate.cli.render import markup, shown
from abgate.cli.typer_app import app, group
from abgate.compare.drift import parse_allow
from abgate.errors import UsageError
from abgate.ledger.compare import compare, resolve
from abgate.ledger.entries import LedgerRecord
from abgate.ledger.history import DEFAULT_MIN_CHANGE, history
from abgate.ledger.history_report import HEADER, render, row
from abgate.ledger.index import add, check, index_quietly, read_entry
from abgate.ledger.paths import ledger_path
from abgate.ledger.store import opened
from abgate.runner.documents import write_record

ledger_app = group("ledger", "The results ledger: index run, A/B, bench and baseline "
                   "directories and imported results.")
LedgerOpt = typer.Option(None, "--ledger", help="Ledger file (default: $ABGATE_LEDGER, "
                         "else ~/.local/share/abgate/ledger.sqlite).")


def index_finished(out: Path) -> None:
    """Index a finished directory; a failure is a warning on stderr, never an error."""
    added = index_quietly(out)
    if added is not None and added.action in ("new", "updated", "moved"):
        typer.echo(f"ledger: {added.action} {added.entry.kind} {added.entry.id[:12]}",
                   err=True)


def _decision(record: LedgerRecord) -> str:
    """The machine's decision, and the engineer's beside it when one is recorded."""
    text = str(record.decision or "-")
    human = record.human_decision
    return f"{text}; decided {human}" if human else text


def _when(ts: float | None) -> str:
    return "-" if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).strftime(
        "%Y-%m-%d %H:%M")


@ledger_app.command("add")
def add_command(paths: list[Path] = typer.Argument(..., help="Run, A/B, bench or baseline "
                                                   "directories; lm-eval samples_*.jsonl; "
                                                   "vllm bench serve result JSON."),
                ledger: Path = LedgerOpt) -> None:
    """Index existing directories or files (re-adding is idempotent)."""
    entries = [read_entry(path) for path in paths]  # a bad one refused before any write
    with opened(ledger_path(ledger)) as db:
        for path, entry in zip(paths, entries, strict=True):
            done = add(db, path, entry)
            extra = f" (was at {done.other_path})" if done.action == "moved" else (
                f" (already recorded at {done.other_path}; not added)"
                if done.action == "copy" else "")
            typer.echo(shown(f"{done.action:9} {done.entry.kind:10} {done.entry.id[:12]}  "
                             f"{done.entry.path}{extra}"))


@ledger_app.command("ls")
def ls_command(kind: str = typer.Option(None, help="Only this kind (run, ab, bench, "
                                        "baseline, lm-eval, vllm-bench)."),
               ledger: Path = LedgerOpt) -> None:
    """List recorded directories; a moved or deleted one is shown as MISSING."""
    with opened(ledger_path(ledger)) as db:
        records = db.records(kind)
        table = Table(title=f"ledger {db.path}: {len(records)} records")
        for col in ("id", "kind", "started (UTC)", "commit", "status", "decision", "path"):
            table.add_column(col, overflow="fold")
        for r in records:
            missing = not Path(r.path).exists()
            if missing:
                db.mark_missing(r.id, True)
            commit = (r.git_commit or "-")[:10] + ("+dirty" if r.git_dirty else "")
            table.add_row(r.id[:12], r.kind, _when(r.started_at), commit,
                          "MISSING" if missing else (r.status or "-"),
                          _decision(r), markup(r.path))
    Console(width=200, emoji=False, highlight=False).print(table)


@ledger_app.command("check")
def check_command(ledger: Path = LedgerOpt) -> None:
    """Check every recorded path; exit 1 when any is missing, changed or unreadable."""
    with opened(ledger_path(ledger)) as db:
        results = check(db)
    bad = [c for c in results if c.state != "ok"]
    for c in results:
        typer.echo(shown(f"{c.state.upper():10} {c.record.kind:10} {c.record.id[:12]}  "
                         f"{c.record.path}" + (f"  ({c.detail})" if c.detail else "")))
    typer.echo(f"{len(results) - len(bad)} ok, {len(bad)} not")
    raise typer.Exit(1 if bad else 0)


@ledger_app.command("forget")
def forget_command(record: str = typer.Argument(..., help="Record id (or a unique prefix)."),
                   ledger: Path = LedgerOpt) -> None:
    """Remove one record from the ledger (the directory itself is not touched)."""
    with opened(ledger_path(ledger)) as db:
        found = db.find(record)
        db.forget(found.id)
    typer.echo(f"forgot {found.kind} {found.id[:12]} {found.path}")


@app.command("history")
def history_command(
    metric: str = typer.Argument(..., help="e.g. steady_decode_tps, accuracy, ttft_s."),
    model: str = typer.Option(None, help="Model path, file name or SHA-256 prefix."),
    engine: str = typer.Option(None, help="Engine name (llamacpp, openai, vllm, ...)."),
    config: str = typer.Option(None, help="Effective-config digest (prefix)."),
    suite: str = typer.Option(None, help="Suite (gsm8k, synthetic, bench, ...)."),
    workload: str = typer.Option(None, help="Workload digest (prefix)."),
    unit: str = typer.Option(None, help="Unit: an A/B arm, a bench case (in512/out128)."),
    all_status: bool = typer.Option(False, "--all-status", help="Include failed and "
                                    "interrupted records."),
    min_change: float = typer.Option(DEFAULT_MIN_CHANGE, help="Speed: smallest relative "
                                     "change called a step."),
    html: Path = typer.Option(None, "--html", help="Also write an HTML page with plots."),
    as_json: bool = typer.Option(False, "--json", help="Print the history as JSON."),
    ledger: Path = LedgerOpt,
) -> None:
    """A metric over time and commits for matching configurations, steps flagged."""
    if not 0 <= min_change < 1:
        raise UsageError(f"--min-change must be within [0, 1), got {min_change}")
    with opened(ledger_path(ledger)) as db:
        h = history(db, metric, model=model, engine=engine, config=config, suite=suite,
                    workload=workload, unit=unit, all_status=all_status,
                    min_change=min_change)
    if as_json:
        typer.echo(json.dumps({"metric": h.metric, "min_change": h.min_change, "series": [
            {"key": s.key._asdict(), "points": [vars(p) for p in s.points]} for s in h.series]},
            indent=2))
    else:
        console = Console(width=220, emoji=False, highlight=False)
        for s in h.series:
            table = Table(title=f"{metric}: {s.label}")
            for col in HEADER:
                table.add_column(col, overflow="fold")
            for p in s.points:
                table.add_row(*row(p))
            console.print(table)
        typer.echo(f"{len(h.steps)} step(s) flagged in {len(h.series)} configuration(s)")
    if html is not None:
        html.write_text(render(h), encoding="utf-8")
        typer.echo(f"wrote {html}", err=as_json)


@app.command("compare")
def compare_command(
    a: str = typer.Argument(..., help="Baseline: RUN_DIR, AB_DIR:ARM, an lm-eval samples "
                            "file, a vllm bench JSON, or @LEDGER_ID[:ARM]."),
    b: str = typer.Argument(..., help="Candidate, the same forms."),
    policy: str = typer.Option(None, help="Policy TOML (default: the A/B's, else shipped)."),
    out: Path = typer.Option(None, "-o", "--out", help="Write the comparison JSON here."),
    allow_diff: list[str] = typer.Option(
        [], "--allow-diff", help="Configuration keys expected to differ (patterns by class, "
        "comma-separated, repeatable: 'host.*,env.CUDA_VISIBLE_DEVICES'); the rest are "
        "listed as unexplained."),
    ledger: Path = LedgerOpt,
) -> None:
    """Compare two recorded runs or arms with abgate ab's statistics and policy, and
    their recorded configurations. Exit 0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE."""
    allow = parse_allow(allow_diff)
    if a.startswith("@") or b.startswith("@"):
        with opened(ledger_path(ledger)) as db:
            ref_a, ref_b = resolve(a, db), resolve(b, db)
    else:
        ref_a, ref_b = resolve(a), resolve(b)
    result = compare(ref_a, ref_b, policy, allow_diff=allow)
    if result.warning:
        print(f"WARNING: {shown(result.warning)}", file=sys.stderr)
    v = result.verdict
    typer.echo(shown(f"{b} vs {a}: {v.decision}  (interleaved: {result.interleaved})"))
    for reason in v.reasons:
        typer.echo(f"  - {shown(reason)}")
    conf = result.configuration
    typer.echo("configuration: " + shown(conf["summary"] if conf["available"]
                                         else conf["reason"]))
    if out is not None:
        write_record(out, result)
        typer.echo(f"wrote {out}")
    raise typer.Exit(result.exit_code)
