"""``--junit FILE`` and ``--summary-md FILE`` of ``abgate ab`` and ``abgate report``
(abgate.report.ci), and the step summary on GitHub Actions: with ``--summary-md``, when
``$GITHUB_STEP_SUMMARY`` is set, the Markdown summary is also appended to it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from abgate.errors import UsageError

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"

Junit = Annotated[Path | None, typer.Option(
    "--junit", help="Write a JUnit XML file: one testcase per gate, a failed gate "
    "carrying the verdict line.")]
SummaryMd = Annotated[Path | None, typer.Option(
    "--summary-md", help="Write the verdict, the gates, what differed and the MDE as "
    "Markdown (a PR comment); also appended to $GITHUB_STEP_SUMMARY when that is set.")]


def check_paths(*paths: Path | None) -> None:
    """Bad output paths refused before anything runs: a directory, a missing parent."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir():
            raise UsageError(f"cannot write {path}: it is a directory (give a file name)")
        if not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: its directory {path.parent} does not "
                             "exist")


def write(ab_dir: Path, junit: Path | None, summary: Path | None) -> None:
    """The CI files of the A/B in ``ab_dir`` (from its saved records only)."""
    from abgate.report import ci, write_text_atomic

    if junit is None and summary is None:
        return
    doc, _ = ci.load(ab_dir)
    if junit is not None:
        write_text_atomic(junit, ci.junit_xml(doc))
        typer.echo(f"wrote {junit}", err=True)
    if summary is None:
        return
    text = ci.summary_md(ab_dir)
    write_text_atomic(summary, text)
    typer.echo(f"wrote {summary}", err=True)
    if step := os.environ.get(STEP_SUMMARY):
        with open(step, "a", encoding="utf-8") as f:
            f.write(text)
