"""``abgate ab``: a matched A/B with a verdict. Exit 0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE,
2 bad input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from abgate import signals
from abgate.ab import Experiment, load_experiment
from abgate.ab.checks import check_experiment
from abgate.ab.finish import check_complete_ab
from abgate.ab.revisions import Revisions, SourceTable, build_arms, declared, read_source
from abgate.ab.state import AB_FILE
from abgate.ab.workflow import recorded_result, run_experiment
from abgate.cli import ci_outputs
from abgate.cli import engine_opts as eo
from abgate.cli.finishing import finish_dir, finishing, resumed_line
from abgate.cli.render import markup, shown
from abgate.cli.typer_app import app
from abgate.cli.verify_cmd import SignKey, check_sign_key, sign_after
from abgate.engines.args import parse_pairs
from abgate.errors import UsageError
from abgate.progress import reporter
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import AbRecord, AnyRecord
from abgate.records.facts import check_patterns
from abgate.report.agreement_sections import evidence_line
from abgate.runner.execute import read_resumable
from abgate.runner.provenance import ProvenanceOptions
from abgate.runner.spec import RunConfig
from abgate.schema import replaced
from abgate.suites import parse_seeds


def _from_flags(suite: str, data: str | None, limit: int | None, seeds: str | None,
                max_tokens: int | None, flags: eo.EngineFlags,
                a_arg: list[str], b_arg: list[str], a_env: list[str], b_env: list[str],
                b_model: str | None, b_changes: list[str]) -> Experiment:
    """Without a file: two arms of the engine group's engine (``--engine``, ``--model``,
    ``--engine-arg``, ``--env`` and the served options for both), A and B."""
    shared = RunConfig(**flags.spec(), suite=suite, data=data,
                       limit=limit if limit is not None else 20,
                       seeds=tuple(parse_seeds(seeds or "0")),
                       max_tokens=max_tokens if max_tokens is not None else 256)
    if not (a_arg or b_arg or a_env or b_env or b_model):
        raise UsageError("nothing differs between the arms: give --b-engine-arg, --b-env or "
                         "--b-model (or an experiment file)")

    def arm(args: list[str], env: list[str], model_: str | None) -> RunConfig:
        return replace(shared, model=model_ or shared.model,
                       engine_args={**shared.engine_args, **parse_pairs(args, "--engine-arg")},
                       env={**shared.env, **parse_pairs(env, "--env", coerce=False)})

    changes = {"B": check_patterns("--b-changes", b_changes)} if b_changes else {}
    return Experiment(name="ab", arms={"A": arm(a_arg, a_env, None),
                                       "B": arm(b_arg, b_env, b_model)}, baseline="A",
                      changes=changes)


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
        exp = replace(exp, schedule=replaced(s, "--schedule/--warmup",
                                             mode=schedule or s.mode,
                                             warmup=s.warmup if warmup is None else warmup))
    return exp if policy is None else replace(exp, policy=policy)


def _with_stopping(exp: Experiment, sequential: bool | None, max_items: int | None,
                   look_every: int | None) -> Experiment:
    """``--sequential/--fixed-n``, ``--max-items``, ``--look-every`` over the file's."""
    if sequential is None and max_items is None and look_every is None:
        return exp
    s = exp.schedule
    seq = s.sequential if sequential is None else sequential
    if not seq and (max_items is not None or look_every is not None):
        raise UsageError("--max-items and --look-every apply only to a sequential A/B "
                         "(--sequential, or [schedule] stopping = \"sequential\")")
    new = replaced(s, "--max-items/--look-every", stopping="sequential" if seq else "fixed",
                   max_items=(max_items if max_items is not None else s.max_items)
                   if seq else None,
                   look_every=(look_every if look_every is not None else s.look_every)
                   if seq else 1)
    return replace(exp, schedule=new)


def _with_evidence(exp: Experiment, agreement: bool | None, probes: bool | None) -> Experiment:
    e = exp.evidence
    return replace(exp, evidence=replace(
        e, agreement=e.agreement if agreement is None else agreement,
        probes=e.probes if probes is None else probes))


def _print_verdicts(result: ComparisonDoc, status: str, paths: list[Path]) -> None:
    console = Console(soft_wrap=True)  # a verdict line stays one line in a log or pipe
    for arm, c in result.comparisons.items():
        v = c.verdict
        title = markup(f"{arm} vs {result.baseline}: {v.decision}")
        console.print(f"[bold]{title}[/bold]")
        if v.explanation:
            console.print(f"  {markup(v.explanation)}")
        for reason in v.reasons:
            console.print(f"  - {markup(reason)}")
        for note in v.notes:
            if note.startswith("Sequential A/B:"):
                console.print(f"  {markup(note)}")
        evidence = evidence_line(c.comparison, arm)
        if evidence:
            console.print(f"  [dim]{markup(evidence)}[/dim]")
        for note in v.notes:
            if note.startswith(("Undeclared differences", "Opt-out evidence: none",
                                "Declared, but no recorded value differs")):
                typer.echo(f"warning: {shown(note)}", err=True)
    console.print(markup(f"A/B {status}; decision {result.decision}; reports: "
                         + ", ".join(str(p) for p in paths)))


def _experiment_of(doc: AnyRecord) -> dict[str, Any] | None:
    return doc.experiment.to_dict() if isinstance(doc, AbRecord) else None


def _recorded(resume: Path, doc: AnyRecord) -> Experiment:
    """The experiment an A/B directory was started with."""
    exp = Experiment.from_dict(_experiment_of(doc), f"{resume / AB_FILE}: experiment")
    hidden = [f"{arm}.{path}" for arm, c in exp.arms.items() for path in c.redacted()]
    if hidden:
        raise UsageError(f"--resume {resume}: the recorded experiment has redacted secrets "
                         f"({', '.join(hidden)}); resume with the experiment file: "
                         f"abgate ab FILE --resume {resume}")
    return exp


def _finished(resume: Path, doc: AnyRecord, exp: Callable[[Experiment], Experiment],
              reanalyse: bool, policy: str | None, sign: Path | None = None,
              ci: tuple[Path | None, Path | None] = (None, None)) -> None:
    """``--resume`` of a complete A/B (or ``--reanalyse``): say so, show the verdict
    (recorded, or recomputed from the saved samples) and exit with it; nothing runs.
    ``exp`` makes the experiment given (file, overrides) from the recorded one."""
    recorded = Experiment.from_dict(_experiment_of(doc), f"{resume / AB_FILE}: experiment")
    if (replace(exp(recorded), policy=None).to_dict()
            != replace(recorded, policy=None).to_dict()):
        raise UsageError(f"--resume {resume}: the A/B there is {doc.status}, and the "
                         "experiment given differs from the one it recorded; use a new "
                         "directory (or --force to run the given one there)")
    check_complete_ab(resume, recorded)  # its samples, as any resume checks them
    if reanalyse:
        typer.echo(f"--reanalyse: recomputing {resume}'s verdict and reports from its saved "
                   "samples (no engine is loaded; no sample, score or probe is redone)",
                   err=True)
        with signals.deferred():
            result = recorded_result(resume, reanalyse=reanalyse, policy=policy)
            finish_dir(resume)
    else:  # its verdict, reports and ledger entry completed if a signal cut them short
        parts = finish_dir(resume)
        typer.echo(resumed_line("A/B", resume, parts) + ". Its recorded verdict follows "
                   "(--reanalyse recomputes it from the saved samples, --force runs the "
                   "whole A/B again)", err=True)
        result = recorded_result(resume)
    _print_verdicts(result.comparison, result.outcome.status, result.reports)
    ci_outputs.write(resume, *ci)
    sign_after(resume, sign)  # (--reanalyse rewrites the reports: signed as they are now)
    raise typer.Exit(int(result.comparison.exit_code or 0))


def _experiment(experiment: Path | None, recorded: Callable[[], Experiment] | None,
                limit: int | None, seeds: str | None, max_tokens: int | None,
                flags: dict[str, Any]) -> Experiment:
    """The experiment to run: the file, else the resumed A/B's, else the flags'."""
    if experiment is None and recorded is None:
        return _from_flags(limit=limit, seeds=seeds, max_tokens=max_tokens, **flags)
    _no_engine_flags(flags["flags"])
    if experiment is not None:
        return _override(load_experiment(experiment), limit, seeds, max_tokens)
    assert recorded is not None  # (narrowing: one of the two is given)
    return _override(recorded(), limit, seeds, max_tokens)


def _no_engine_flags(flags: eo.EngineFlags) -> None:
    """With a file (or ``--resume``) the arms say which engine each runs: the engine
    group's options are refused, not ignored."""
    if given := [g for g in flags.given() if g != "--endpoint"]:  # --endpoint: a fleet
        raise UsageError(f"{', '.join(given)}: the engine options apply to an A/B without "
                         "an experiment file (the file's arms, or the resumed A/B's, say "
                         "which engine each arm runs)")


@app.command("ab")
@eo.engine_group
def ab_command(
    experiment: Path = typer.Argument(None, help="Experiment TOML (see examples/)."),
    out: Path = typer.Option(None, "-o", "--out", help="A/B directory to write."),
    resume: Path = typer.Option(None, help="Finish an interrupted A/B in this directory (a "
                                "complete one: its recorded verdict, nothing is rerun)."),
    force: bool = typer.Option(False, help="Overwrite an existing A/B directory (with "
                               "--resume: run a complete one again)."),
    policy: str = typer.Option(None, help="Policy TOML, or shipped: default, fast-path, "
                               "no-slower."),
    limit: int = typer.Option(None, help="Override the number of items."),
    seeds: str = typer.Option(None, help="Override the seeds, e.g. 0,1."),
    max_tokens: int = typer.Option(None, help="Override the output token limit."),
    schedule: str = typer.Option(None, help="auto, interleave or blocks."),
    warmup: int = typer.Option(None, help="Warm-up requests per arm (per load)."),
    suite: str = typer.Option("synthetic", help="Without a file: the suite."),
    data: str = typer.Option(None, help="Without a file: gsm8k data path."),
    b_model: str = typer.Option(None, help="Without a file: arm B's model."),
    a_engine_arg: list[str] = typer.Option([], "--a-engine-arg", help="Arm A: KEY=VALUE."),
    b_engine_arg: list[str] = typer.Option([], "--b-engine-arg", help="Arm B: KEY=VALUE."),
    a_env: list[str] = typer.Option([], "--a-env", help="Arm A env: KEY=VALUE."),
    b_env: list[str] = typer.Option([], "--b-env", help="Arm B env: KEY=VALUE."),
    b_changes: list[str] = typer.Option([], "--b-changes", help="Without a file: a key arm "
                                        "B declares it changes (repeatable); any other "
                                        "difference is then refused."),
    allow_diff: list[str] = typer.Option([], "--allow-diff", help="A key pattern any arm "
                                         "may differ in, e.g. 'env.*' (repeatable)."),
    contract: str = typer.Option(None, help="Contract TOML every arm is held to (each "
                                 "arm's declared changes exempt)."),
    manifest: str = typer.Option(None, help="Manifest JSON whose digest each arm embeds."),
    allow_stale_manifest: eo.AllowStaleManifest = False,
    allow_source_change: bool = typer.Option(
        False, help="With --resume: continue although the git checkout changed since the "
        "A/B started (recorded under resumes)."),
    agreement: bool = typer.Option(None, "--agreement/--no-agreement", help="Distribution "
                                   "agreement per arm (default: the file's [evidence], on)."),
    probes: bool = typer.Option(None, "--probes/--no-probes", help="Health probes per arm "
                                "(default: the file's [evidence], on)."),
    weights_diff: bool = typer.Option(False, "--weights-diff", help="Diff each candidate's "
                                      "model file against the baseline's (abgate[weights])."),
    reanalyse: bool = typer.Option(False, "--reanalyse", help="With --resume: recompute the "
                                   "verdict and reports from the saved samples (e.g. under "
                                   "another --policy); loads no engine."),
    sequential: bool = typer.Option(None, "--sequential/--fixed-n", help="Stop as soon as "
                                    "every verdict is certain (anytime-valid gates), or run "
                                    "every item (default: the file's [schedule] stopping)."),
    max_items: int = typer.Option(None, help="Sequential: at most this many items."),
    look_every: int = typer.Option(None, help="Sequential: look at the gates every K items."),
    cluster: str = typer.Option(None, help="Shard the items over Ray replicas: auto, "
                                "local[:N] or ray://HOST:PORT (docs/cluster.md)."),
    rev: str = typer.Option(None, "--rev", help="A/B two source revisions, BASE..HEAD: "
                            "each built once by the file's [source] build command "
                            "(docs/revisions.md)."),
    junit: ci_outputs.Junit = None,
    summary_md: ci_outputs.SummaryMd = None,
    sign: SignKey = None,
    flags: eo.EngineFlags = eo.FLAGS,
) -> None:
    """Run a matched A/B: quality and speed of each arm, paired statistics, a verdict."""
    check_sign_key(sign)
    ci_outputs.check_paths(junit, summary_md)
    if rev is not None and experiment is None:
        raise UsageError("--rev needs an experiment file (its [source] build command and "
                         "the arms that run the builds)")
    source = read_source(experiment, rev)
    built: list[Revisions] = []
    out, doc = _ab_dir(out, resume, reanalyse)
    arm_flags = dict(suite=suite, data=data, flags=flags, a_arg=a_engine_arg,
                     b_arg=b_engine_arg, a_env=a_env, b_env=b_env, b_model=b_model,
                     b_changes=b_changes)

    def given(recorded: Callable[[], Experiment] | None) -> Experiment:
        exp = _experiment(experiment, recorded, limit, seeds, max_tokens, arm_flags)
        if allow_diff:
            exp = replace(exp, allow_differences=(
                *exp.allow_differences, *check_patterns("--allow-diff", allow_diff)))
        exp = _with_evidence(_with_schedule_and_policy(exp, schedule, warmup, policy),
                             agreement, probes)
        exp = _with_stopping(exp, sequential, max_items, look_every)
        exp = _endpoints(exp, flags, experiment, resume)
        if source is None:
            return exp
        if not built:  # the cheap checks first, then each revision built (or cached)
            built.append(revision_builds(exp, source, prov()))
        return built[0].exp

    def prov() -> ProvenanceOptions:
        return ProvenanceOptions(contract, manifest, allow_stale_manifest=allow_stale_manifest,
                                 allow_source_change=allow_source_change)

    complete = doc is not None and doc.status == "complete"
    if resume is not None and doc is not None and (reanalyse or (complete and not force)):
        _finished(resume, doc, lambda rec_: given(lambda: rec_), reanalyse or policy is not None,
                  policy, sign, (junit, summary_md))
    exp = given(None if resume is None or doc is None else lambda: _recorded(resume, doc))
    if exp.suites:  # several suites, one verdict (abgate.ab.suites)
        from abgate.cli.suites_out import suites_ab

        suites_ab(exp, out, resume is not None, force, policy, prov())
    redo = resume is not None and force and complete
    if redo:
        typer.echo(f"--force: running the A/B in {resume} again from the start (its "
                   "samples, scores, probes and verdict are replaced)", err=True)
    strategy = _fleet(cluster, experiment, flags, resume is not None)
    if strategy is not None:  # refused before anything is written
        from abgate.fleet.matching import check_schedule

        check_schedule(exp)
    with reporter(f"ab {out.name}") as rep, finishing(out):
        result = run_experiment(exp, out, resume=resume is not None and not redo, force=force,
                                on_start=rep.on_start, progress=rep.on_sample,
                                provenance=prov(), weights_diff=weights_diff,
                                on_phase=rep.on_start, schedule=strategy,
                                revisions=built[0] if built else None)
    with signals.deferred():  # the verdict shown, then the ledger entry, whole
        _print_verdicts(result.comparison, result.outcome.status, result.reports)
        finish_dir(out)
        ci_outputs.write(out, junit, summary_md)
    sign_after(out, sign)
    raise typer.Exit(result.exit_code)


def revision_builds(exp: Experiment, source: SourceTable, prov: ProvenanceOptions
                    ) -> Revisions:
    """A revision A/B's builds: the experiment checked as templates first (bad input
    before any build), then each revision built once (a cached one: nothing built)."""
    check_experiment(declared(exp), prov)
    revisions = build_arms(exp, source)
    for arm, b in revisions.builds.items():
        how = "cached, nothing built" if b.cached else f"built in {b.manifest.duration_s:.1f} s"
        typer.echo(f"{arm}: {b.manifest.revision} ({b.manifest.commit[:12]}, tree "
                   f"{b.manifest.tree[:12]}) {how}: {b.directory}", err=True)
    return revisions


def _endpoints(exp: Experiment, flags: eo.EngineFlags, experiment: Path | None,
               resume: Path | None) -> Experiment:
    """With a file (or ``--resume``), ``--endpoint`` repeated: every arm on those
    servers, one endpoint per replica (docs/cluster.md)."""
    if not flags.endpoint or (experiment is None and resume is None):
        return exp
    from abgate.fleet.endpoints import with_endpoints

    return with_endpoints(exp, list(flags.endpoint))


def _fleet(cluster: str | None, experiment: Path | None, flags: eo.EngineFlags,
           resuming: bool = False) -> Any:
    """The fleet strategy (``--cluster`` or the file's ``[cluster]`` table; or
    ``--endpoint`` with a file), or None."""
    import tomllib

    table = tomllib.loads(experiment.read_text()).get("cluster") if experiment else None
    if flags.endpoint and (experiment is not None or resuming):
        if cluster is not None:
            raise UsageError("--endpoint and --cluster: give one (servers you run, or a "
                             "Ray cluster whose replicas load the engines)")
        from abgate.fleet.endpoints import endpoint_strategy

        allowed = tuple(str(x) for x in (table or {}).get("allow_host_differences", ()))
        return endpoint_strategy(list(flags.endpoint), allowed)
    if cluster is None and not table:
        return None
    from abgate.fleet.cluster import cluster_spec
    from abgate.fleet.coordinator import fleet_strategy

    return fleet_strategy(cluster_spec(cluster, table))


def _ab_dir(out: Path | None, resume: Path | None, reanalyse: bool
            ) -> tuple[Path, AnyRecord | None]:
    """The A/B directory (``-o`` or ``--resume``) and, on a resume, its record."""
    doc = None
    if resume is not None:
        if out is not None and out.resolve() != resume.resolve():
            raise UsageError("give either -o DIR or --resume DIR, not two different directories")
        out = resume
        doc = read_resumable(resume, AB_FILE, "ab")
    elif reanalyse:
        raise UsageError("--reanalyse needs --resume AB_DIR (the A/B to re-analyse)")
    if out is None:
        raise UsageError("missing -o AB_DIR (where to write the A/B)")
    return out, doc
