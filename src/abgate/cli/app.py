"""The Typer application object. Command modules import ``app`` and register on it."""

from __future__ import annotations

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
) -> None:
    """abgate: is it faster without hurting quality, and can anyone reproduce the baseline?"""
