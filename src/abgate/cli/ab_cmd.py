"""``abgate ab``: a matched A/B with a verdict. Exit 0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE,
2 bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from abgate.ab import Experiment, load_experiment
from abgate.ab.experiment import check_stopping
from abgate.ab.run import AB_FILE
from abgate.ab.workflow import run_experiment
from abgate.cli.app import app
from abgate.cli.ledger_cmd import index_finished
from abgate.engines.args import parse_pairs
from abgate.errors import UsageError
from abgate.progress import reporter
from abgate.report.agreement_sections import evidence_line
from abgate.runner.documents import read_record
from abgate.runner.provenance import ProvenanceOptions
from abgate.runner.spec import RunConfig
from abgate.suites import parse_seeds


def _from_flags(suite: str, data: str | None, limit: int | None, seeds: str | None,
                max_tokens: int | None, model: str | None, engine_arg: list[str],
                a_arg: list[str], b_arg: list[str], a_env: list[str], b_env: list[str],
                b_model: str | None) -> Experiment:
    shared = RunConfig(suite=suite, data=data, limit=limit if limit is not None else 20,
                       seeds=tuple(parse_seeds(seeds or "0")),
                       max_tokens=max_tokens if max_tokens is not None else 256, model=model,
                       engine_args=parse_pairs(engine_arg, "--engine-arg"))
    if not (a_arg or b_arg or a_env or b_env or b_model):
        raise UsageError("nothing differs between the arms: give --b-engine-arg, --b-env or "
                         "--b-model (or an experiment file)")

    def arm(args: list[str], env: list[str], model_: str | None) -> RunConfig:
        return replace(shared, model=model_ or shared.model,
                       engine_args={**shared.engine_args, **parse_pairs(args, "--engine-arg")},
                       env=parse_pairs(env, "--env", coerce=False))

    return Experiment(name="ab", arms={"A": arm(a_arg, a_env, None),
                                       "B": arm(b_arg, b_env, b_model)}, baseline="A")


def _override(exp: Experiment, limit: int | None, seeds: str | None,
              max_tokens: int | None) -> Experiment:
    changes: dict[str, object] = {}
    if limit is not None:
        changes["limit"] = limit
    if seeds is not None:
        changes["seeds"] = tuple(parse_seeds(seeds))
    if max_tokens is not None:
        changes["max_tokens"] = max_tokens
    if not changes:
        return exp
    return replace(exp, arms={k: replace(v, **changes) for k, v in exp.arms.items()})  # type: ignore[arg-type]


def _with_schedule_and_policy(exp: Experiment, schedule: str | None, warmup: int | None,
                              policy: str | None) -> Experiment:
    if schedule is not None or warmup is not None:
        s = exp.schedule
        exp = replace(exp, schedule=replace(s, mode=schedule or s.mode,
                                            warmup=s.warmup if warmup is None else warmup))
    return exp if policy is None else replace(exp, policy=policy)


def _with_stopping(exp: Experiment, sequential: bool | None, max_items: int | None,
                   look_every: int | None) -> Experiment:
    """``--sequential/--fixed-n``, ``--max-items``, ``--look-every`` over the file's."""
    if sequential is None and max_items is None and look_every is None:
        return exp
    s = exp.schedule
    seq = s.sequential if sequential is None else sequential
    new = replace(s, stopping="sequential" if seq else "fixed",
                  max_items=(max_items if max_items is not None else s.max_items)
                  if seq else None,
                  look_every=(look_every if look_every is not None else s.look_every)
                  if seq else 1)
    if not seq and (max_items is not None or look_every is not None):
        raise UsageError("--max-items and --look-every apply only to a sequential A/B "
                         "(--sequential, or [schedule] stopping = \"sequential\")")
    check_stopping("--max-items/--look-every", new)
    return replace(exp, schedule=new)


def _with_evidence(exp: Experiment, agreement: bool | None, probes: bool | None) -> Experiment:
    e = exp.evidence
    return replace(exp, evidence=replace(
        e, agreement=e.agreement if agreement is None else agreement,
        probes=e.probes if probes is None else probes))


def _print_verdicts(result: dict[str, Any], status: str, paths: list[Path]) -> None:
    console = Console()
    for arm, c in result["comparisons"].items():
        v = c["verdict"]
        console.print(f"[bold]{arm} vs {result['baseline']}: {v['decision']}[/bold]")
        for reason in v.get("reasons", []):
            console.print(f"  - {reason}")
        for note in v.get("notes", []):
            if str(note).startswith("Sequential A/B:"):
                console.print(f"  {note}")
        evidence = evidence_line(c.get("comparison") or {}, arm)
        if evidence:
            console.print(f"  [dim]{evidence}[/dim]")
    console.print(f"A/B {status}; decision {result['decision']}; reports: "
                  + ", ".join(str(p) for p in paths))


def _recorded(resume: Path) -> Experiment:
    """The experiment an interrupted A/B directory was started with."""
    if not (resume / AB_FILE).exists():
        raise UsageError(f"--resume {resume}: no {AB_FILE} there; nothing to resume")
    exp = Experiment.from_dict(read_record(resume / AB_FILE, "ab").get("experiment"),
                               f"{resume / AB_FILE}: experiment")
    hidden = [f"{arm}.{path}" for arm, c in exp.arms.items() for path in c.redacted()]
    if hidden:
        raise UsageError(f"--resume {resume}: the recorded experiment has redacted secrets "
                         f"({', '.join(hidden)}); resume with the experiment file: "
                         f"abgate ab FILE --resume {resume}")
    return exp


@app.command("ab")
def ab_command(
    experiment: Path = typer.Argument(None, help="Experiment TOML (see examples/)."),
    out: Path = typer.Option(None, "-o", "--out", help="A/B directory to write."),
    resume: Path = typer.Option(None, help="Finish an interrupted A/B in this directory."),
    force: bool = typer.Option(False, help="Overwrite an existing A/B directory."),
    policy: str = typer.Option(None, help="Policy TOML (default: the shipped policy)."),
    limit: int = typer.Option(None, help="Override the number of items."),
    seeds: str = typer.Option(None, help="Override the seeds, e.g. 0,1."),
    max_tokens: int = typer.Option(None, help="Override the output token limit."),
    schedule: str = typer.Option(None, help="auto, interleave or blocks."),
    warmup: int = typer.Option(None, help="Warm-up requests per arm (per load)."),
    suite: str = typer.Option("synthetic", help="Without a file: the suite."),
    data: str = typer.Option(None, help="Without a file: gsm8k data path."),
    model: str = typer.Option(None, help="Without a file: the model for both arms."),
    b_model: str = typer.Option(None, help="Without a file: arm B's model."),
    engine_arg: list[str] = typer.Option([], "--engine-arg", help="Both arms: KEY=VALUE."),
    a_engine_arg: list[str] = typer.Option([], "--a-engine-arg", help="Arm A: KEY=VALUE."),
    b_engine_arg: list[str] = typer.Option([], "--b-engine-arg", help="Arm B: KEY=VALUE."),
    a_env: list[str] = typer.Option([], "--a-env", help="Arm A env: KEY=VALUE."),
    b_env: list[str] = typer.Option([], "--b-env", help="Arm B env: KEY=VALUE."),
    contract: str = typer.Option(None, help="Contract TOML for the baseline arm."),
    manifest: str = typer.Option(None, help="Manifest JSON whose digest each arm embeds."),
    agreement: bool = typer.Option(None, "--agreement/--no-agreement", help="Distribution "
                                   "agreement per arm (default: the file's [evidence], on)."),
    probes: bool = typer.Option(None, "--probes/--no-probes", help="Health probes per arm "
                                "(default: the file's [evidence], on)."),
    weights_diff: bool = typer.Option(False, "--weights-diff", help="Diff each candidate's "
                                      "model file against the baseline's (abgate[weights])."),
    sequential: bool = typer.Option(None, "--sequential/--fixed-n", help="Stop as soon as "
                                    "every verdict is certain (anytime-valid gates), or run "
                                    "every item (default: the file's [schedule] stopping)."),
    max_items: int = typer.Option(None, help="Sequential: at most this many items."),
    look_every: int = typer.Option(None, help="Sequential: look at the gates every K items."),
) -> None:
    """Run a matched A/B: quality and speed of each arm, paired statistics, a verdict."""
    if resume is not None:
        if out is not None and out.resolve() != resume.resolve():
            raise UsageError("give either -o DIR or --resume DIR, not two different directories")
        out = resume
    if out is None:
        raise UsageError("missing -o AB_DIR (where to write the A/B)")
    if experiment is not None:
        exp = _override(load_experiment(experiment), limit, seeds, max_tokens)
    elif resume is not None:
        exp = _override(_recorded(resume), limit, seeds, max_tokens)
    else:
        exp = _from_flags(suite, data, limit, seeds, max_tokens, model, engine_arg,
                          a_engine_arg, b_engine_arg, a_env, b_env, b_model)
    exp = _with_evidence(_with_schedule_and_policy(exp, schedule, warmup, policy), agreement,
                         probes)
    exp = _with_stopping(exp, sequential, max_items, look_every)
    with reporter(f"ab {out.name}") as rep:
        result = run_experiment(exp, out, resume=resume is not None, force=force,
                                on_start=rep.on_start, progress=rep.on_sample,
                                provenance=ProvenanceOptions(contract, manifest),
                                weights_diff=weights_diff)
    _print_verdicts(result.comparison, result.outcome.status, result.reports)
    index_finished(out)
    raise typer.Exit(result.exit_code)
