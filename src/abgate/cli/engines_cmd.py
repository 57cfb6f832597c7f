"""``abgate engines``: every registered engine and where it came from."""

from __future__ import annotations

import typer

from abgate.cli.typer_app import app
from abgate.engines import engine_sources


@app.command("engines")
def engines_command() -> None:
    """List the engines --engine accepts: name, class (module:Class), the distribution
    that registered it (entry point group abgate.engines, or abgate's built-ins) and
    why a plug-in cannot be used, if it cannot (docs/engines.md). Nothing is imported."""
    for source in engine_sources().values():
        line = f"{source.name:<14} {source.value}  ({source.origin})"
        if source.problem is not None:
            line += f"  UNUSABLE: {source.problem}"
        typer.echo(line)
