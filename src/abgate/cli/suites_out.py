"""``abgate ab FILE`` for an experiment with ``[suites.NAME]`` tables: every suite's
A/B, then the one verdict over all of them (Holm), printed and in ``OUT/suites.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from abgate.ab.experiment import Experiment
from abgate.ab.suites import run_suites
from abgate.cli.finishing import finish_dir
from abgate.cli.render import markup
from abgate.runner.provenance import ProvenanceOptions

__all__ = ["suites_command"]


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
