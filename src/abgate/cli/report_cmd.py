"""``abgate report DIR``: render an A/B directory's saved results as Markdown, JSON or
HTML. Nothing is run or recomputed; the same records always give the same bytes."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from abgate.ab.state import AB_FILE
from abgate.cli import ci_outputs
from abgate.cli.typer_app import app
from abgate.errors import AbgateError, UsageError
from abgate.ledger.finish import finish
from abgate.report import check_format, render, write_text_atomic


@app.command("report")
def report_command(
    ab_dir: Annotated[Path, typer.Argument(metavar="DIR",
                                           help="A/B directory written by abgate ab.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="md, json or html.")] = "md",
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write to this file instead of standard output.")] = None,
    junit: ci_outputs.Junit = None,
    summary_md: ci_outputs.SummaryMd = None,
) -> None:
    """Render an A/B's report (Markdown, JSON or HTML) from its saved records only."""
    check_format(fmt)
    if output is not None and output.is_dir():  # bad input: before anything is written
        raise UsageError(f"cannot write {output}: it is a directory (give a file name)")
    ci_outputs.check_paths(junit, summary_md)
    if (ab_dir / AB_FILE).is_file():  # a finishing a signal cut short, completed first,
        with contextlib.suppress(AbgateError):  # quietly; one it cannot finish: the
            finish(ab_dir)  # render below says what is wrong, in its own words
    text = render(ab_dir, fmt)
    ci_outputs.write(ab_dir, junit, summary_md)
    if output is None:
        typer.echo(text, nl=False)
        return
    write_text_atomic(output, text)
    typer.echo(f"wrote {output}", err=True)
