"""``abgate baseline record`` / ``check``: reference outputs reproduced token for token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from abgate.baseline import check_baseline, record_baseline
from abgate.baseline.report import CheckReport
from abgate.baseline.upgrade import upgrade_baseline
from abgate.bench import BenchConfig, limits
from abgate.bench.prompt_file import read_prompt_file
from abgate.bench.prompts import input_lens, parse_shas
from abgate.cli import engine_opts as eo
from abgate.cli.cluster_out import Cluster, ClusterOpt, cluster_spec_of, print_cluster_check
from abgate.cli.ledger_cmd import index_finished
from abgate.cli.typer_app import group
from abgate.cli.verify_cmd import SignKey, check_sign_key, sign_after
from abgate.compare.drift import parse_allow
from abgate.engines.args import parse_pairs
from abgate.errors import UsageError
from abgate.progress import reporter
from abgate.records.bench_sections import Divergence
from abgate.records.facts import CLASSES
from abgate.runner.documents import write_record
from abgate.runner.provenance import ProvenanceOptions

_CLASSES = ", ".join(CLASSES)
baseline_app = group("baseline", "Record reference outputs and check a build against them.")


@baseline_app.command("record")
@eo.engine_group
def record_command(
    out: Path = typer.Option(..., "-o", "--out", help="Baseline directory to write."),
    input_len: str = typer.Option(None, help="Prompt lengths in tokens, or 'max' (default "
                                  "128,512; with --prompt-file: the whole prompt)."),
    prompt_file: str = typer.Option(None, help="Your own prompt: token IDs as JSON, or text "
                                    "(each --input-len N takes its first N tokens)."),
    expect_prompt_sha: str = typer.Option(
        None, help="Refuse to record unless the prompt SHA-256s match (one per length)."),
    output_len: int = typer.Option(64, help="Greedy output tokens per case (EOS ignored)."),
    repeats: int = typer.Option(3, help="Measured requests per case."),
    warmup: int = typer.Option(1, help="Warm-up requests per case."),
    probes: bool = typer.Option(True, "--probes/--no-probes", help="Record probe health."),
    probe_len: int = typer.Option(512, help="Needle probe context length."),
    contract: eo.Contract = None,
    manifest: eo.Manifest = None,
    allow_stale_manifest: eo.AllowStaleManifest = False,
    force: bool = typer.Option(False, help="Overwrite an existing baseline directory."),
    sign: SignKey = None,
    cluster: Cluster = None,
    cluster_opt: ClusterOpt = None,
    flags: eo.EngineFlags = eo.FLAGS,
) -> None:
    """Record greedy reference outputs, speed and probe health for the current build.
    With --cluster: recorded on one replica (a Ray actor with the [cluster] resources of
    one replica), the process kind 'baseline check --cluster' checks in."""
    check_sign_key(sign)
    fleet = cluster_spec_of(cluster, cluster_opt)
    config = BenchConfig(**flags.spec(),
                         input_lens=input_lens(input_len, prompt_file, "128,512"),
                         prompt=read_prompt_file(prompt_file) if prompt_file else None,
                         expect_prompt_sha=tuple(parse_shas(expect_prompt_sha)),
                         output_len=output_len, warmup=warmup, repeats=repeats,
                         probes=probes, probe_len=probe_len)
    prov = ProvenanceOptions(contract, manifest, allow_stale_manifest)
    if fleet is not None:
        doc = _record_cluster(config, out, fleet, force, prov)
    else:
        with reporter(f"baseline record {out.name}") as rep:
            doc = record_baseline(config, out, force=force, provenance=prov, progress=rep)
    for case in doc.cases:
        output = case.output_sha256 or f"text {case.output_text_sha256}"
        agreed = case.repeat_agreement.summary if case.repeat_agreement else "-"
        typer.echo(f"case {case.label}: prompt {case.prompt_sha256[:16]} output "
                   f"{output[:16]} decode {case.speed.steady_decode_tps.median or 0:.1f} "
                   f"tok/s; {agreed}")
    for p in doc.probes:
        typer.echo(f"probe {p.name}: {'pass' if p.passed else 'FAIL'} ({p.reason})")
    _not_certified(limits.BASELINE)
    typer.echo(f"baseline written to {out / 'baseline.json'}")
    sign_after(out, sign)
    index_finished(out)


@baseline_app.command("check")
def check_command(
    baseline: Path = typer.Argument(..., help="Baseline directory."),
    engine_arg: list[str] = typer.Option([], "--engine-arg", help="Override KEY=VALUE."),
    tolerance: float = typer.Option(0.10, help="Allowed decode slowdown (0.10 = 10%; 1 "
                                    "checks tokens and probes only)."),
    repeats: int = typer.Option(None, help="Measured requests per case (default: as "
                                "recorded); more narrow the speed interval."),
    allow_diff: list[str] = typer.Option(
        [], "--allow-diff", help="Configuration keys that may differ from the recorded "
        "ones: patterns by class, comma-separated, repeatable ('host.*,env.CUDA_VISIBLE_"
        "DEVICES'; classes: " + _CLASSES + ")."),
    strict_volatile: bool = typer.Option(
        False, "--strict-volatile", help="Compare the volatile figures too (GPU memory in "
        "use, a profiler's KV-cache block counts, load averages): listed apart otherwise."),
    contract: eo.Contract = None,
    json_out: Path = typer.Option(None, "--json", help="Write the check report here."),
    cluster: Cluster = None,
    cluster_opt: ClusterOpt = None,
) -> None:
    """Re-run the recorded cases on this build. Exit 0 only when every check passes; a
    speed difference the runs' own noise cannot resolve is inconclusive, not a failure.
    With --cluster: on every replica, passed only when each one passes."""
    if not 0 <= tolerance <= 1:
        raise UsageError(f"--tolerance must be within [0, 1] (1 ignores speed), got {tolerance}")
    fleet = cluster_spec_of(cluster, cluster_opt)
    options: dict[str, Any] = {
        "engine_args": parse_pairs(engine_arg, "--engine-arg"), "tolerance": tolerance,
        "repeats": repeats, "allow_diff": parse_allow(allow_diff),
        "strict_volatile": strict_volatile, "provenance": ProvenanceOptions(contract=contract)}
    if fleet is not None:
        _check_cluster(baseline, fleet, options, json_out)
    with reporter(f"baseline check {baseline.name}") as rep:
        report = check_baseline(baseline, progress=rep, **options)
    _print_check(report)
    _not_certified(limits.BASELINE)
    if json_out is not None:
        json_out.write_text(json.dumps(report.document().to_dict(), indent=2) + "\n")
    raise typer.Exit(0 if report.passed else 1)


@baseline_app.command("upgrade")
def upgrade_command(
    baseline: Path = typer.Argument(..., help="Baseline directory."),
    accept_unsealed: bool = typer.Option(
        False, help="Seal a baseline recorded before seals as it is now (nothing can "
        "verify its content; its sha256 before the upgrade is recorded)."),
) -> None:
    """Re-seal a baseline written by an older abgate under today's rules, after verifying
    its old seal over the content as it is; one whose seal does not verify is refused."""
    typer.echo(upgrade_baseline(baseline, accept_unsealed=accept_unsealed).summary())


def _record_cluster(config: BenchConfig, out: Path, fleet: Any, force: bool,
                    provenance: ProvenanceOptions) -> Any:
    from abgate.fleet.baseline import record_on_cluster

    doc, facts = record_on_cluster(config, out, fleet, force=force, provenance=provenance)
    typer.echo(f"recorded on replica 0: node {str(facts.node_id or '-')[:12]} "
               f"{facts.address or ''}, {', '.join(facts.gpu_uuids or []) or 'no GPU'}")
    return doc


def _check_cluster(baseline: Path, fleet: Any, options: dict[str, Any],
                   json_out: Path | None) -> None:
    from abgate.fleet.baseline import check_on_cluster

    doc = check_on_cluster(baseline, fleet, **options)
    print_cluster_check(doc)
    _not_certified(limits.BASELINE)
    if json_out is not None:
        write_record(json_out, doc)
    raise typer.Exit(0 if doc.passed else 1)


def _print_check(report: CheckReport) -> None:
    verdict = "PASS" if report.passed else "FAIL"
    if report.passed and report.speed_inconclusive:
        verdict += " (speed inconclusive)"
    table = Table(title=f"baseline check: {verdict}")
    for col in ("case", "tokens", "first divergence", "tok/s (rec -> now)", "speed"):
        table.add_column(col)
    for row in report.cases:
        s = row.speed
        interval = "" if s.low is None or s.high is None else f" [{s.low:.2f}-{s.high:.2f}]"
        table.add_row(row.case, "match" if row.tokens_match else "DIFFER",
                      _where(row.divergence),
                      f"{s.recorded_median or 0:.1f} -> {s.current_median or 0:.1f}"
                      + (" prefill" if s.metric == "prefill_tps" else " decode"),
                      {"ok": "ok", "slower": "SLOWER", "inconclusive": "inconclusive",
                       "unmeasured": "UNMEASURED"}[s.outcome] + interval)
    Console().print(table)
    drift = report.configuration
    typer.echo(f"configuration: {drift.summary}" + ("" if drift.passed else
                                                    "  <- not allowed"))
    for d in drift.volatile:
        typer.echo(f"volatile (not compared): {d.key}: {d.recorded} -> {d.current}")
    for row in report.cases:
        div = row.divergence
        typer.echo(f"tokens {row.case}: {row.repeats.summary}" + (
            "" if div is None else f"; first divergence: {div.request} at {div.unit} "
            f"{div.position}"))
    for row in report.cases:
        if row.speed.outcome != "ok":
            typer.echo(f"speed {row.case}: {row.speed.outcome}: {row.speed.reason}")
    for p in report.probes:
        typer.echo(f"probe {p.name}: recorded {'pass' if p.recorded else 'fail'}, now "
                   f"{'pass' if p.current else 'fail'} ({p.reason})"
                   + ("" if p.ok else "  <- regression"))


def _where(div: Divergence | None) -> str:
    """A check row's first divergence: the request, where, both tokens (and whether each
    is in the other's top-k, where known)."""
    if div is None:
        return "-"
    return (f"{div.request}, {div.unit} {div.position}: {div.reference_token} -> "
            f"{div.current_token}"
            + ("" if div.reference_in_current_top_k is None else
               f" (in each other's top-5: {div.reference_in_current_top_k} / "
               f"{div.current_in_reference_top_k})"))


def _not_certified(items: tuple[str, ...]) -> None:
    typer.echo("This does not certify:")
    for item in items:
        typer.echo(f"  - {item}")
