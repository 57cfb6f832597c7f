"""``abgate run``: one engine configuration over a suite, with crash-safe records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from abgate import signals
from abgate.cli import engine_opts as eo
from abgate.cli.finishing import finish_dir, finishing, resumed_line
from abgate.cli.render import print_run_summary
from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.progress import reporter
from abgate.records.documents import AnyRecord, RunRecord
from abgate.runner import RunConfig, execute, prepare
from abgate.runner import records as rec
from abgate.runner.complete import checked_complete
from abgate.runner.documents import read_document
from abgate.runner.execute import read_resumable
from abgate.runner.provenance import ProvenanceOptions
from abgate.runner.records import RUN_FILE
from abgate.runner.summary import Summary
from abgate.suites import parse_seeds

# CLI option name -> RunConfig field, for options that may be taken from a resumed run.
_CONFIG_PARAMS = ("engine", "model", "engine_arg", "env", "suite", "data", "difficulty",
                  "synthetic_seed", "limit", "sample", "sample_seed", "seeds", "max_tokens",
                  "temperature", "top_p", "top_k", "shots", "shots_file", "system",
                  *eo.ENGINE_OPTIONS)


def config_from_options(o: dict[str, Any]) -> RunConfig:
    flags = eo.EngineFlags(**{k: o[k] for k in eo.GROUP})
    return RunConfig(
        **flags.spec(), suite=o["suite"], data=o["data"], difficulty=o["difficulty"],
        synthetic_seed=o["synthetic_seed"], limit=o["limit"], sample=o["sample"],
        sample_seed=o["sample_seed"], seeds=tuple(parse_seeds(o["seeds"])),
        max_tokens=o["max_tokens"], temperature=o["temperature"], top_p=o["top_p"],
        top_k=o["top_k"], shots=o["shots"], shots_file=o["shots_file"], system=o["system"])


def _config(doc: AnyRecord) -> dict[str, Any]:
    return doc.given_config() if isinstance(doc, RunRecord) else {}


def _merged_config(ctx: typer.Context, resume: Path, doc: AnyRecord,
                   o: dict[str, Any]) -> RunConfig:
    """Options left at their defaults take the resumed run's recorded values."""
    base = RunConfig.from_dict(_config(doc), f"{resume / RUN_FILE}: config")
    explicit = {k for k in _CONFIG_PARAMS if _given(ctx, k)}
    if not explicit:
        return base
    merged = config_from_options(o)
    fields = {f: getattr(merged if _option_for(f) in explicit else base, f)
              for f in RunConfig.__dataclass_fields__}
    fields["engine_options"] = {**base.engine_options, **merged.engine_options}
    return RunConfig(**fields)


def _resumed_config(ctx: typer.Context, resume: Path, doc: AnyRecord,
                    o: dict[str, Any]) -> RunConfig:
    config = _merged_config(ctx, resume, doc, o)
    if hidden := config.redacted():
        raise UsageError(f"--resume {resume}: the recorded run has redacted secrets "
                         f"({', '.join(hidden)}); give those options again (--env, "
                         "--engine-arg, --launch, --endpoint)")
    return config


def _already_complete(ctx: typer.Context, resume: Path, doc: AnyRecord,
                      o: dict[str, Any]) -> None:
    """``--resume`` of a complete run: say so, show its summary, exit 0; nothing loads."""
    recorded = RunConfig.from_dict(_config(doc), f"{resume / RUN_FILE}: config").to_dict()
    if diffs := list(rec.iter_diff(recorded, _merged_config(ctx, resume, doc, o).to_dict())):
        raise UsageError(f"--resume {resume}: the run there is already complete; the options "
                         f"given change its {', '.join(diffs[:4])} (use a new directory, or "
                         "--force to run it again there)")
    samples = checked_complete(resume, prepare(RunConfig.from_dict(
        _config(doc), f"{resume / RUN_FILE}: config")))
    parts = finish_dir(resume)  # its summary and ledger entry, if a signal cut them short
    n = sum(1 for s in samples if not s.warmup)
    typer.echo(resumed_line("run", resume, parts).replace(" is already complete",
                                                          f" is already complete ({n} samples)")
               + " (--force runs its recorded configuration again)", err=True)
    print_run_summary(resume, "complete", read_document(resume / rec.SUMMARY_FILE, Summary))
    raise typer.Exit(0)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set option ``name`` (Typer may vendor its own click, so compare
    the source by name rather than by enum identity)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def _option_for(field: str) -> str:
    return {"engine_args": "engine_arg"}.get(field, field)


@app.command("run")
@eo.engine_group
def run_command(
    ctx: typer.Context,
    suite: str = typer.Option("gsm8k", help="Suite: gsm8k or synthetic."),
    data: str = typer.Option(None, help="gsm8k data: PATH.jsonl, PATH.parquet or hf:openai/gsm8k."),
    difficulty: str = typer.Option("easy", help="synthetic suite: easy, medium or hard."),
    synthetic_seed: int = typer.Option(0, help="synthetic suite: generator seed."),
    limit: int = typer.Option(None, help="Use the first N items."),
    sample: int = typer.Option(None, help="Use N items drawn with --sample-seed."),
    sample_seed: int = typer.Option(0, help="Seed for --sample."),
    seeds: str = typer.Option("0", help="Comma-separated seeds; each item runs once per seed."),
    max_tokens: int = typer.Option(512, help="Output token limit per sample."),
    temperature: float = typer.Option(0.0, help="0 = greedy."),
    top_p: float = typer.Option(1.0),
    top_k: int = typer.Option(0, help="0 disables top-k."),
    shots: int = typer.Option(0, help="k-shot exemplars (never from the evaluated split)."),
    shots_file: str = typer.Option(None, help="JSONL of {question, answer} shots."),
    system: str = typer.Option(None, help="System prompt (default: the model template's)."),
    flags: eo.EngineFlags = eo.FLAGS,
    out: Path = typer.Option(None, "-o", "--out", help="Run directory to write."),
    resume: Path = typer.Option(None, help="Finish an interrupted run in this directory (a "
                                "complete one is left as it is)."),
    force: bool = typer.Option(False, help="Overwrite an existing run directory (with "
                               "--resume: run a complete one again)."),
    contract: str = typer.Option(None, help="Contract TOML checked before and after load."),
    manifest: str = typer.Option(None, help="Manifest JSON whose digest the run embeds."),
    allow_stale_manifest: eo.AllowStaleManifest = False,
    allow_source_change: bool = typer.Option(
        False, help="With --resume: continue although the git checkout changed since the "
        "run started (recorded under resumes)."),
) -> None:
    """Run one engine configuration over a suite and record every sample."""
    opts = dict(ctx.params)
    redo = False
    if resume is not None:
        if out is not None and out.resolve() != resume.resolve():
            raise UsageError("give either -o DIR or --resume DIR, not two different directories")
        out = resume
        doc = read_resumable(resume, RUN_FILE, "run")
        if doc.status == "complete":
            if not force:
                _already_complete(ctx, resume, doc, opts)
            redo = True
            typer.echo(f"--force: running the complete run {resume} again from the start "
                       "(its samples are replaced)", err=True)
        config = _resumed_config(ctx, resume, doc, opts)
    else:
        if out is None:
            raise UsageError("missing -o RUN_DIR (where to write the run)")
        config = config_from_options(opts)
    prepared = prepare(config)
    with reporter(f"run {out.name}") as rep, finishing(out):
        outcome = execute(prepared, out, resume=resume is not None and not redo, force=force,
                          on_start=rep.on_start, on_sample=rep.on_sample,
                          provenance=ProvenanceOptions(
                              contract, manifest, allow_stale_manifest=allow_stale_manifest,
                              allow_source_change=allow_source_change))
    with signals.deferred():  # the summary shown, then the ledger entry, whole
        print_run_summary(outcome.out_dir, outcome.status, outcome.summary)
        finish_dir(outcome.out_dir)
    if outcome.status == "interrupted":
        raise typer.Exit(130)
