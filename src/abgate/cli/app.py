"""The Typer application object. Command modules import ``app`` and register on it."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from abgate import __version__

app = typer.Typer(
    name="abgate",
    help="Matched quality+speed A/B verdicts and reproducible baselines for LLM engines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"abgate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    ledger: Path = typer.Option(
        None, "--ledger", help="Results ledger for this command (the same as setting "
        "ABGATE_LEDGER; 'off' turns indexing off)."
    ),
) -> None:
    """abgate: is it faster without hurting quality, and can anyone reproduce the baseline?"""
    if ledger is not None:
        os.environ["ABGATE_LEDGER"] = str(ledger)
