"""The Typer application object. Command modules import ``app`` and register on it."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from abgate import __version__

# Help text is plain text: rich markup would eat bracketed words such as "[evidence]"
# or "abgate[weights]" (tests/test_cli_help.py renders every command's help to check).
app = typer.Typer(
    name="abgate",
    help="Matched quality+speed A/B verdicts and reproducible baselines for LLM engines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def group(name: str, help_text: str) -> typer.Typer:
    """A subcommand group of ``app`` (``abgate NAME ...``), with plain help like it."""
    sub = typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(sub, name=name)
    return sub


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
