"""``abgate ab FILE`` for an experiment with ``[suites.NAME]`` tables: every suite's
A/B, then the one verdict over all of them (Holm), printed and in ``OUT/suites.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from abgate.ab.experiment import Experiment
from abgate.ab.suites import run_suites
from abgate.cli.finishing import finish_dir, finishing
from abgate.cli.render import markup
from abgate.errors import UsageError
from abgate.progress import reporter
from abgate.runner.provenance import ProvenanceOptions

__all__ = ["suites_ab", "suites_command"]


def suites_command(exp: Experiment, out: Path, *, force: bool, policy: str | None,
                   provenance: ProvenanceOptions, **kwargs: Any) -> int:
    """Run and print; the exit code is the combined verdict's."""
    result = run_suites(exp, out, force=force, policy=policy, provenance=provenance,
                        **kwargs)
    for directory in result.doc.directories.values():
        finish_dir(out / directory)  # each suite's A/B: its ledger entry, as a plain A/B's
    console = Console(soft_wrap=True)
    v = result.doc.verdict
    for key, decision in v.suites.items():
        console.print(markup(f"suite {key}: {decision}"))
    console.print(f"[bold]{markup(f'{exp.name}: {v.decision} over {len(v.suites)} suites')}"
                  "[/bold]")
    for reason in v.reasons:
        console.print(f"  - {markup(reason)}")
    console.print(f"  [dim]{markup(f'Multiplicity: {v.method}.')}[/dim]")
    console.print(markup("reports: " + ", ".join(str(p) for p in result.reports)))
    return result.exit_code


def suites_ab(exp: Experiment, out: Path, resuming: bool, force: bool, policy: str | None,
              provenance: ProvenanceOptions) -> NoReturn:
    """``abgate ab`` of an experiment with ``[suites]``: each suite's A/B, one verdict."""
    if resuming:
        raise UsageError("--resume of an experiment with [suites]: resume each "
                         "suite's directory (OUT/suites/NAME) instead")
    with reporter(f"ab {out.name}") as rep, finishing(out):
        code = suites_command(exp, out, force=force, policy=policy, provenance=provenance,
                              on_start=rep.on_start, progress=rep.on_sample,
                              on_phase=rep.on_start)
    raise typer.Exit(code)
