"""``abgate bench``: exact speed figures on fixed-length prompts, beside the engine's own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from abgate.bench.load import parse_load
from abgate.bench.prompt_file import read_prompt_file
from abgate.bench.prompts import input_lens, parse_shas
from abgate.bench.session import BenchConfig, PreparedBench, execute_bench, prepare_bench
from abgate.cli import engine_opts as eo
from abgate.cli.cluster_out import Cluster, ClusterOpt, cluster_spec_of, print_cluster_bench
from abgate.cli.ledger_cmd import index_finished
from abgate.cli.load_cmd import run_load_bench
from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.progress import reporter
from abgate.records.bench_sections import (
    BenchProbes,
    BenchSummaryCase,
    EngineResources,
    FidelityDistributions,
    PeakBandwidth,
)
from abgate.records.sections import Distribution
from abgate.records.side_documents import BenchSummary
from abgate.runner.provenance import ProvenanceOptions

# (label, speed field, scale, format, engine counterpart, engine scale)
_ROWS: tuple[tuple[str, str, float, str, str | None, float], ...] = (
    ("prefill tok/s", "prefill_tps", 1.0, ",.1f", "engine_prefill_tps", 1.0),
    ("TTFT ms", "ttft_s", 1000.0, ",.2f", None, 1.0),
    ("steady decode tok/s", "steady_decode_tps", 1.0, ",.2f", "engine_decode_tps", 1.0),
    ("TPOT ms", "tpot_ms", 1.0, ",.3f", "engine_tpot_ms", 1.0),
    ("E2E s", "e2e_s", 1.0, ",.3f", None, 1.0),
    ("output tok/s", "output_tps", 1.0, ",.2f", None, 1.0),
)


def _f(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _spread(d: Distribution | None, scale: float, spec: str) -> tuple[str, str, str]:
    if d is None or not d.n or d.median is None:
        return "-", "-", "-"
    med = _f(d.median * scale, spec)
    rng = (f"{_f(None if d.min is None else d.min * scale, spec)} – "
           f"{_f(None if d.max is None else d.max * scale, spec)}")
    cv = "-" if d.cv is None else f"{d.cv * 100:.2f}%"
    return med, rng, cv


def _median(d: Distribution | None) -> float | None:
    return None if d is None else d.median


def _engine_ttft_ms(case: BenchSummaryCase, fid: FidelityDistributions) -> float | None:
    eng = _median(fid.engine_prefill_tps)
    return (case.prompt_tokens or 0) / eng * 1000.0 if eng else None


def case_table(case: BenchSummaryCase, engine_name: str) -> Table:
    """Rows: the metric; columns: median, min–max, CV, the engine's own figure, ratio."""
    table = Table(title=f"input {case.input_len} / output {case.output_len} tokens  "
                        f"({case.n} measured, {case.n_warmup} warm-up excluded)",
                  title_justify="left")
    for col in ("metric", "median", "min – max", "CV", f"{engine_name} (median)",
                "abgate/engine"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    fid = case.fidelity or FidelityDistributions()
    for label, key, scale, spec, eng_key, eng_scale in _ROWS:
        med, rng, cv = _spread(case.speed.of(key), scale, spec)
        eng = _median(getattr(fid, eng_key)) if eng_key else None
        if key == "ttft_s":
            eng = _engine_ttft_ms(case, fid)
        ours = case.speed.of(key).median
        ratio = ours * scale / eng if ours is not None and eng else None
        table.add_row(label, med, rng, cv, _f(eng * eng_scale if eng else None, spec),
                      _f(ratio, ".4f"))
    itl = case.itl_ms or Distribution()
    table.add_row("ITL ms (p10/p50/p90)", _f(itl.median, ".3f"),
                  f"{_f(itl.p10, '.3f')} / {_f(itl.p90, '.3f')}", "", "", "")
    med, rng, cv = _spread(fid.overhead_us_per_token, 1.0, ".1f")
    table.add_row("loop overhead µs/token", med, rng, cv, "", "")
    return table


def _roofline_line(case: BenchSummaryCase, peak: PeakBandwidth) -> str:
    r = case.roofline
    if r is None or not r.weights_bytes_per_token:
        return "roofline: model bytes unknown"
    mb = r.weights_bytes_per_token / 1e6
    kv = r.kv_bytes_per_token
    frac = r.fraction_of_peak or r.fraction_of_peak_weights
    achieved = r.achieved_gbps or r.achieved_gbps_weights
    return (f"roofline: {mb:.1f} MB weights{f' + {kv / 1e6:.1f} MB KV' if kv else ''} per token"
            f" -> {_f(achieved, '.2f')} GB/s achieved; peak {_f(peak.gbps, '.2f')} GB/s "
            f"({peak.source or '-'}) -> {_f(frac * 100 if frac else None, '.1f')}% of peak")


def probes_table(probes: BenchProbes) -> Table:
    table = Table(title=f"health probes: {probes.n_passed}/{probes.n} passed",
                  title_justify="left")
    for col in ("probe", "result", "finish", "prompt tok", "output tok", "expected", "got"):
        table.add_column(col)
    for r in probes.results:
        got = " ".join((r.output_text or "").split())
        table.add_row(r.name, "PASS" if r.passed else f"FAIL ({r.reason})",
                      r.finish_reason, str(r.prompt_tokens), str(r.output_tokens),
                      r.expected, got[:60] + ("…" if len(got) > 60 else ""))
    return table


def _case_lines(console: Console, case: BenchSummaryCase, peak: PeakBandwidth) -> None:
    same = "identical over all repeats" if case.outputs_identical else \
        "DIFFERS between repeats (non-deterministic greedy output)"
    warm = case.warmup_identical
    same += "" if warm is None else ("; the warm-up too" if warm else
                                     "; the warm-up DIFFERS")
    console.print(f"prompt sha256: {case.prompt_sha256}")
    console.print(f"output sha256: {case.output_sha256}  ({same})")
    console.print(_roofline_line(case, peak))
    tp = case.throughput_tps or Distribution()
    if case.batch_size > 1 and tp.median is not None:
        console.print(f"throughput at concurrency {case.concurrency}: "
                      f"{tp.median:,.1f} output tok/s median over {tp.n} batches "
                      f"(min {_f(tp.min, ',.1f')}, max {_f(tp.max, ',.1f')})")


def print_bench(out: Path, status: str, summary: BenchSummary | None,
                engine_name: str) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    console.print(f"[bold]{escape(str(out))}[/bold]  {escape(f'[{status}]')}")
    if summary is None:
        return
    for case in summary.cases:
        console.print(case_table(case, engine_name))
        _case_lines(console, case, summary.peak_bandwidth or PeakBandwidth())
        console.print()
    if summary.probes:
        console.print(probes_table(summary.probes))
    _resources_line(console, summary.resources or EngineResources())
    console.print("This does not certify:", highlight=False)
    for item in summary.not_certified or []:
        console.print(f"  - {item}", highlight=False, markup=False)


def _resources_line(console: Console, res: EngineResources) -> None:
    """The engine's peak RSS and GPU memory (``bench.resources``)."""
    if res.peak_rss_bytes:
        where = "this process (in-process engine)" if res.in_process else f"pid {res.pid}"
        gpus = "; ".join(f"GPU{g.index} {(g.memory_used or 0) / 2**20:,.0f} MiB used"
                         for g in res.gpus or [])
        console.print(f"peak RSS: {res.peak_rss_bytes / 2**20:,.1f} MiB ({where})"
                      + (f"; {gpus}" if gpus else ""))


@app.command("bench")
@eo.engine_group
def bench_command(
    input_len: str = typer.Option(None, help="Prompt lengths in tokens, comma-separated; "
                                  "'max' fills the context (n_ctx - output len). Default "
                                  "512; with --prompt-file, the whole prompt."),
    prompt_file: str = typer.Option(None, help="Your own prompt: token IDs as JSON, or text "
                                    "(each --input-len N takes its first N tokens)."),
    output_len: int = typer.Option(128, help="Decoded tokens per request (EOS ignored)."),
    warmup: int = typer.Option(1, help="Warm-up requests per length (recorded, excluded); "
                               "with --load: sent before the clock starts (not recorded)."),
    repeats: int = typer.Option(3, help="Measured requests per length."),
    prompt_seed: int = typer.Option(0, help="Seed of the filler text."),
    expect_prompt_sha: str = typer.Option(
        None, help="Refuse to run unless the prompt SHA-256s match (one per length)."),
    probes: bool = typer.Option(False, "--probes", help="Run the health probes too."),
    probe_len: int = typer.Option(1024, help="Needle probe: context length in tokens."),
    probe_depth: float = typer.Option(0.5, help="Needle probe: depth 0 (start) .. 1 (end)."),
    probe_seed: int = typer.Option(0, help="Seed of the probe contents."),
    peak_bw: float = typer.Option(None, help="Peak memory bandwidth in GB/s (skips the "
                                  "probe)."),
    weights_bytes: int = typer.Option(None, help="Weight bytes read per token (default: "
                                      "from the model file)."),
    out: Annotated[Path | None, typer.Option(
        "-o", "--out", help="Run directory (default: runs/bench-<timestamp>).")] = None,
    force: bool = typer.Option(False, help="Overwrite an existing run directory."),
    load: str = typer.Option("closed", help="Load shape: closed (default), concurrency:N or "
                             "poisson:RATE (served, docs/load.md)."),
    burstiness: float = typer.Option(1.0, help="--load poisson: gamma shape (1: Poisson)."),
    max_concurrency: int = typer.Option(None, help="--load: cap on requests in flight."),
    num_prompts: int = typer.Option(100, help="--load: requests sent."),
    load_seed: int = typer.Option(0, help="--load: seed of the prompts and arrivals."),
    load_data: str = typer.Option(None, help="--load: GSM8K data or a JSONL prompt file."),
    client_procs: int = typer.Option(1, help="--load: client processes the requests in "
                                     "flight are spread over."),
    contract: eo.Contract = None,
    manifest: eo.Manifest = None,
    allow_stale_manifest: eo.AllowStaleManifest = False,
    cluster: Cluster = None,
    cluster_opt: ClusterOpt = None,
    flags: eo.EngineFlags = eo.FLAGS,
) -> None:
    """Measure prefill, TTFT, steady decode and TPOT on fixed-length prompts."""
    shape = parse_load(load, burstiness=burstiness, max_concurrency=max_concurrency,
                       num_prompts=num_prompts, seed=load_seed)
    fleet = cluster_spec_of(cluster, cluster_opt)
    if fleet is not None and not shape.closed:
        raise UsageError("--cluster with --load: a served load bench drives one endpoint; "
                         "run it once per server")
    if not shape.closed:
        run_load_bench(shape, flags.spec(), data=load_data, output_len=output_len, out=out,
                       force=force, warmup=warmup, procs=client_procs)
        return
    config = BenchConfig(
        **flags.spec(),
        input_lens=input_lens(input_len, prompt_file, "512"),
        prompt=read_prompt_file(prompt_file) if prompt_file else None,
        output_len=output_len, warmup=warmup,
        repeats=repeats, prompt_seed=prompt_seed,
        expect_prompt_sha=tuple(parse_shas(expect_prompt_sha)), probes=probes,
        probe_len=probe_len, probe_depth=probe_depth, probe_seed=probe_seed,
        peak_bw_gbps=peak_bw, weights_bytes=weights_bytes)
    prepared = prepare_bench(config)
    if out is None:
        out = Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S")
    prov = ProvenanceOptions(contract, manifest, allow_stale_manifest)
    if fleet is not None:
        _bench_cluster(prepared, out, fleet, force, prov)
    with reporter(f"bench {out.name}") as rep:
        outcome = execute_bench(prepared, out, force=force, progress=rep, provenance=prov)
    print_bench(outcome.out_dir, outcome.status, outcome.summary, flags.engine_name)
    index_finished(outcome.out_dir)
    if outcome.status == "interrupted":
        raise typer.Exit(130)


def _bench_cluster(prepared: PreparedBench, out: Path, fleet: Any, force: bool,
                   prov: ProvenanceOptions) -> None:
    """``--cluster``: the bench on every replica (``fleet.bench``); exits."""
    from abgate.fleet.bench import bench_on_cluster

    doc = bench_on_cluster(prepared, out, fleet, force=force, provenance=prov)
    print_cluster_bench(doc, str(out))
    raise typer.Exit(0 if doc.status == "complete" else 1)
