"""``--cluster`` for ``bench`` and ``baseline check``: the options, and the per-replica
tables (which replica, node or GPU is slow, or fails)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from abgate.engines.args import parse_pairs
from abgate.errors import UsageError
from abgate.records.cluster import ClusterBenchDocument, ClusterCheckDocument, ReplicaPart

Cluster = Annotated[str | None, typer.Option(
    help="Run on every replica of a Ray cluster: auto, local[:N] or ray://HOST:PORT "
    "(docs/cluster.md).")]
ClusterOpt = Annotated[list[str] | None, typer.Option(
    "--cluster-opt", help="A [cluster] key for --cluster, KEY=VALUE, repeatable "
    "(replicas=2, num_gpus=0.5, num_cpus=2, placement=spread).")]

# (label, metric, scale, format)
_COLUMNS = (("prefill tok/s", "prefill_tps", 1.0, ",.1f"), ("TTFT ms", "ttft_s", 1e3, ",.2f"),
            ("decode tok/s", "steady_decode_tps", 1.0, ",.2f"), ("TPOT ms", "tpot_ms", 1.0, ",.3f"))


def cluster_spec_of(cluster: str | None, opts: list[str] | None) -> Any:
    """The ``ClusterSpec`` of ``--cluster`` and ``--cluster-opt``, or None."""
    if cluster is None:
        if opts:
            raise UsageError("--cluster-opt needs --cluster (auto, local[:N] or "
                             "ray://HOST:PORT)")
        return None
    from abgate.fleet.cluster import cluster_spec

    return cluster_spec(cluster, parse_pairs(opts or [], "--cluster-opt"))


def _where(r: ReplicaPart) -> tuple[str, str]:
    f = r.facts
    node = f"{str(f.node_id or '-')[:12]} {f.address or ''}".strip()
    gpu = ", ".join(f.gpu_uuids or []) or ", ".join(f.gpu_model or []) \
        or str(f.cpu_model or "-")
    return node, gpu[:40]


def _f(x: float | None, scale: float, spec: str) -> str:
    return "-" if x is None else format(x * scale, spec)


def print_cluster_bench(doc: ClusterBenchDocument, where: str) -> None:
    console = Console(width=150)
    console.print(f"[bold]{where}[/bold]  [{doc.status}]  {len(doc.replicas)} replica(s)"
                  + (" at once" if doc.concurrent else ""))
    parts = {r.index: r for r in doc.replicas}
    for case in doc.cases:
        table = Table(title=f"input {case.input_len} / output {case.output_len} tokens: "
                      "medians per replica", title_justify="left")
        for col in ("replica", "node", "GPU / CPU", *(c[0] for c in _COLUMNS), "output"):
            table.add_column(col, justify="right" if col in dict.fromkeys(
                c[0] for c in _COLUMNS) else "left")
        for row in case.replicas:
            table.add_row(str(row.replica), *_where(parts[row.replica]),
                          *(_f(row.medians.get(m), s, spec) for _, m, s, spec in _COLUMNS),
                          (row.output_sha256 or "-")[:12])
        console.print(table)
        console.print("greedy output identical on every replica" if case.outputs_identical
                      else "greedy output DIFFERS between replicas")
        for sp in case.spread:
            if sp.spread is None or sp.slowest is None:
                continue
            console.print(f"  {sp.metric}: spread {sp.spread * 100:.1f}% (max/min - 1); "
                          f"slowest replica {sp.slowest} at {sp.slowest_vs_median or 0:.3f}x "
                          "the replicas' median", highlight=False)
    if doc.host_differences:
        console.print(f"hosts differ in: {', '.join(doc.host_differences)}")
    for r in doc.replicas:
        if r.status != "complete":
            console.print(f"replica {r.index}: {r.status}: {r.error or '-'}", markup=False)


def print_cluster_check(doc: ClusterCheckDocument) -> None:
    table = Table(title=f"baseline check on {len(doc.replicas)} replica(s): "
                        f"{'PASS' if doc.passed else 'FAIL'}", title_justify="left")
    for col in ("replica", "node", "GPU / CPU", "result", "tokens", "speed", "configuration"):
        table.add_column(col)
    for r in doc.replicas:
        rep = r.report or {}
        cases = rep.get("cases") or []
        tokens = f"{sum(bool(c.get('tokens_match')) for c in cases)}/{len(cases)} match"
        speed = ", ".join(str((c.get("speed") or {}).get("outcome")) for c in cases)
        config = str((rep.get("configuration") or {}).get("summary") or "-")
        table.add_row(str(r.index), *_where(r),
                      "PASS" if r.passed else ("LOST" if r.status == "lost" else "FAIL"),
                      tokens if r.report else "-", speed or "-",
                      config if r.report else (r.error or "-"))
    Console(width=150).print(table)
    if doc.host_differences:
        typer.echo(f"hosts differ in: {', '.join(doc.host_differences)}")
