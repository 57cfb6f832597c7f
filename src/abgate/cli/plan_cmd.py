"""``abgate plan FILE``: each gate's minimum detectable effect at the planned N and the N
a target effect needs, from a prior A/B (``--from``) or a short pilot (``--pilot N``),
before the A/B runs. Exit 0, or 2 for bad input."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from abgate import safefs
from abgate.ab import load_experiment
from abgate.ab.planning import PlanDoc, pilot_experiment, plan_experiment
from abgate.cli.render import markup
from abgate.cli.typer_app import app
from abgate.errors import UsageError

__all__ = ["plan_command"]


def _targets(pairs: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pair in pairs:
        gate, sep, value = pair.partition("=")
        try:
            out[gate.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not gate.strip():
            raise UsageError(f"--target {pair!r}: expected GATE=VALUE, e.g. accuracy=0.08 "
                             "(an accuracy drop of 8 points) or speed=0.1 (10% slower)")
    return out


def _show(value: float | None, unit: str | None) -> str:
    if value is None:
        return "n/a"
    if unit and ("fraction" in unit or "agreement" in unit):
        return f"{100 * value:.2f}%"
    return f"{value:.4g}"


def _print(doc: PlanDoc) -> None:
    console = Console(soft_wrap=True)
    console.print(markup(f"plan {doc.name}: noise from {doc.source}; power {doc.power:.0%}, "
                         f"one-sided alpha {doc.alpha:g}"))
    for r in doc.rows:
        need = "" if r.target is None else (
            f"; {r.n_needed} items to detect {_show(r.target, r.unit)}" if r.n_needed
            else f"; target {_show(r.target, r.unit)} is not beyond the fail threshold")
        bound = " (sigma bounded: no discordant pair seen)" if r.bound else ""
        console.print(markup(f"  {r.suite}/{r.arm} {r.gate}: at {r.n_planned} items detects "
                             f"{r.unit} {_show(r.detectable, r.unit)}{bound}{need}"))
    for key, value in doc.accuracy_unpaired.items():
        console.print(markup(f"  {key} accuracy, unpaired for reference: MDE "
                             f"{_show(value, 'fraction')} beyond the margin"))


@app.command("plan")
def plan_command(
    experiment: Path = typer.Argument(..., help="Experiment TOML (see examples/)."),
    prior: Path = typer.Option(None, "--from", help="A finished A/B directory of the same "
                               "kind whose noise the plan uses."),
    pilot: int = typer.Option(None, help="Run a pilot of N items first (into -o) and plan "
                              "from it."),
    out: Path = typer.Option(None, "-o", "--out", help="With --pilot: the pilot's A/B "
                             "directory."),
    items: int = typer.Option(None, help="Plan for this many items (default: the file's)."),
    target: list[str] = typer.Option([], "--target", help="GATE=VALUE: the true effect "
                                     "to detect, e.g. accuracy=0.08 (repeatable)."),
    policy: str = typer.Option(None, help="Policy TOML, or shipped: default, fast-path, "
                               "no-slower."),
    json_out: Path = typer.Option(None, "--json", help="Write the plan as JSON here."),
) -> None:
    """Minimum detectable effect of every gate at the planned N, before anything runs."""
    exp = load_experiment(experiment)
    targets = _targets(target)
    if items is not None and items < 1:
        raise UsageError(f"--items must be >= 1, got {items}")
    if (prior is None) == (pilot is None):
        raise UsageError("give either --from AB_DIR (a prior A/B) or --pilot N -o DIR")
    if prior is None:
        if out is None:
            raise UsageError("--pilot needs -o DIR (where the pilot A/B is written)")
        from abgate.ab.suites import run_suites
        from abgate.ab.workflow import run_experiment

        pilot_exp = pilot_experiment(exp, pilot)
        if pilot_exp.suites:
            run_suites(pilot_exp, out, force=True, policy=policy)
        else:
            run_experiment(pilot_exp, out, force=True, policy=policy)
        prior = out
    doc = plan_experiment(exp, prior, items=items, targets=targets, policy=policy,
                          source=f"pilot of {pilot} items in {out}" if pilot else None)
    _print(doc)
    if json_out is not None:
        safefs.write_atomic(json_out, (doc.model_dump_json(indent=1) + "\n").encode())
