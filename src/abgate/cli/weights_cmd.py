"""``abgate weights-diff REF OTHER``: per-tensor error of one checkpoint against another.

Prints per-kind and per-layer aggregates, the N worst tensors and any tensor that could
not be compared; ``--json FILE`` writes the full result (see docs/weights-diff.md).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.safefs import refuse_link
from abgate.weights import diff_checkpoints, read_float, write_diff
from abgate.weights.diff import Progress as ProgressFn
from abgate.weights.tables import OUTLIER_REL_L2, kind_ranges, layer_projection_table

__all__ = ["render_result", "weights_diff_command"]

_STAT_COLUMNS = ("tensors", "elements", "mean rel L2", "median rel L2", "max rel L2",
                 "min SQNR dB", "pooled SQNR dB")
_MAX_UNMATCHED = 20


@app.command("weights-diff")
def weights_diff_command(
    ref: Annotated[Path | None, typer.Argument(
        metavar="[REF]", help="Reference checkpoint: .gguf, .safetensors or a shard directory.")
    ] = None,
    other: Annotated[Path | None, typer.Argument(
        metavar="[OTHER]", help="Checkpoint compared against REF (same kinds accepted).")
    ] = None,
    json_out: Annotated[Path | None, typer.Option(
        "--json", metavar="FILE", help="Write the full result (every tensor) as JSON.")] = None,
    top: Annotated[int, typer.Option(
        "--top", min=0, metavar="N", help="How many of the worst tensors to list.")] = 10,
    engine: Annotated[str | None, typer.Option(
        "--engine", help="Diff the weights two arms of this engine hold after load "
        "(llamacpp, transformers, vllm) instead of two checkpoint files.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Both arms' model (with --engine; `model=` in an arm overrides).")
    ] = None,
    arm_a: Annotated[list[str] | None, typer.Option(
        "--arm-a", metavar="KEY=VALUE", help="Arm A's engine arg (repeatable; `model=PATH`)."
    )] = None,
    arm_b: Annotated[list[str] | None, typer.Option(
        "--arm-b", metavar="KEY=VALUE", help="Arm B's engine arg (repeatable; `model=PATH`)."
    )] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", metavar="NAME=VALUE", help="Env for both arms' engines (repeatable).")] = None,
) -> None:
    """Relative L2 error and SQNR of every tensor of OTHER against REF, by layer and kind."""
    if json_out is not None:  # checked before the diff
        if not json_out.parent.is_dir():
            raise UsageError(f"cannot write {json_out}: directory {json_out.parent} "
                             "does not exist")
        refuse_link(json_out)  # write_diff never writes through a link
    with _progress() as progress:
        if engine is not None:
            result = _diff_engines(engine, model, arm_a or [], arm_b or [], env or [], progress)
        elif ref is None or other is None:
            raise UsageError("weights-diff needs REF and OTHER, or --engine with --arm-a/--arm-b")
        else:
            result = diff_checkpoints(ref, other, progress)
    render_result(result, top, Console())
    if json_out is not None:
        write_diff(json_out, result)
        typer.echo(f"wrote {json_out}", err=True)


def _diff_engines(engine: str, model: str | None, arm_a: list[str], arm_b: list[str],
                  env: list[str], progress: ProgressFn | None) -> dict[str, Any]:
    from abgate.ab.runtime_weights import diff_arms
    from abgate.engines.args import parse_pairs
    from abgate.runner.session import EngineSpec

    env_vars = {k: str(v) for k, v in parse_pairs(env, "--env", coerce=False).items()}
    specs = []
    for flag, pairs in (("--arm-a", arm_a), ("--arm-b", arm_b)):
        args = parse_pairs(pairs, flag)
        arm_model = args.pop("model", model)
        specs.append(EngineSpec(engine, None if arm_model is None else str(arm_model),
                                args, {}, env_vars))
    return diff_arms(specs[0], specs[1], progress)


def render_result(result: dict[str, Any], top: int, console: Console) -> None:
    """Print the group tables, the ``top`` worst tensors, unmatched tensors and warnings."""
    for side in ("ref", "other"):
        info = result[side]
        sha = (info["sha256"] or "")[:12] or f"{len(info['files'])} files"
        console.print(f"{side:>5}: {Path(info['path']).name}  [{info['format']}, "
                      f"{info['size_bytes'] / 1e6:.1f} MB, {sha}]", markup=False, highlight=False)
    overall = result["summary"]["overall"]
    console.print(_group_table("By kind", "kind", result["groups"]["by_kind"], overall))
    console.print(_group_table("By layer", "layer", result["groups"]["by_layer"], None))
    console.print(_range_table(result["tensors"]))
    projections = _projection_table(result["tensors"])
    if projections is not None:
        console.print(projections)
    if top > 0:
        console.print(_worst_table(result["tensors"], top))
    unmatched = [t for t in result["tensors"] if t["status"] != "compared"]
    if unmatched:
        console.print(_unmatched_table(unmatched))
    for warning in result["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)


def _group_table(title: str, label: str, groups: Sequence[dict[str, Any]],
                 overall: dict[str, Any] | None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(label)
    for col in _STAT_COLUMNS:
        table.add_column(col, justify="right")
    for group in groups:
        name = "(no layer)" if group[label] is None else str(group[label])
        table.add_row(name, *_stat_cells(group))
    if overall is not None and overall["n_tensors"]:
        table.add_section()
        table.add_row("all", *_stat_cells(overall), style="bold")
    return table


def _range_table(tensors: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="Relative L2 range per kind", title_justify="left")
    for col in ("kind", "tensors", "min rel L2", "max rel L2"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind, n, low, high in kind_ranges(tensors):
        table.add_row(kind, str(n), _rel(low), _rel(high))
    return table


def _projection_table(tensors: Sequence[dict[str, Any]]) -> Table | None:
    kinds, rows = layer_projection_table(tensors)
    if not rows:
        return None
    table = Table(title="Relative L2 per layer and projection", title_justify="left",
                  caption=f"! marks a relative L2 >= {OUTLIER_REL_L2}: beyond quantization "
                  "rounding (a transposed or mis-scaled read)", caption_justify="left")
    table.add_column("layer", justify="right")
    for kind in kinds:
        table.add_column(kind, justify="right")
    for layer, cells in rows:
        table.add_row(str(layer), *(_cell(cells.get(k)) for k in kinds))
    return table


def _cell(value: float | None) -> str:
    if value is None or value < OUTLIER_REL_L2:
        return _rel(value)
    return f"[bold red]{_rel(value)} ![/bold red]"


def _stat_cells(g: dict[str, Any]) -> list[str]:
    return [str(g["n_tensors"]), f"{g['n_elements']:,}", _rel(g["mean_rel_l2"]),
            _rel(g["median_rel_l2"]), _rel(g["max_rel_l2"]), _db(g["min_sqnr_db"]),
            _db(g["pooled_sqnr_db"])]


def _worst_table(tensors: Sequence[dict[str, Any]], top: int) -> Table:
    compared = [t for t in tensors if t["status"] == "compared"]
    worst = sorted(compared, key=_badness, reverse=True)[:top]
    table = Table(title=f"Worst {len(worst)} of {len(compared)} tensors by relative L2 error",
                  title_justify="left")
    for col in ("tensor", "kind", "ref → other", "shape", "rel L2", "SQNR dB", "cosine"):
        table.add_column(col, justify="left" if col in ("tensor", "kind") else "right")
    for t in worst:
        cos = read_float(t["cosine"])
        table.add_row(t["name"], t["kind"], f"{t['dtype_ref']} → {t['dtype_other']}",
                      "×".join(map(str, t["shape_ref"])), _rel(t["rel_l2"]),
                      _db(t["sqnr_db"]), "-" if cos is None else f"{cos:.6f}")
    return table


def _unmatched_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title=f"Not compared ({len(rows)})", title_justify="left")
    for col in ("tensor", "status", "ref", "other", "note"):
        table.add_column(col)
    for t in rows[:_MAX_UNMATCHED]:
        table.add_row(t["name"], t["status"], _side(t, "ref"), _side(t, "other"),
                      t.get("note") or "")
    if len(rows) > _MAX_UNMATCHED:
        table.add_row(f"... {len(rows) - _MAX_UNMATCHED} more (see --json)", "", "", "", "")
    return table


def _side(t: dict[str, Any], side: str) -> str:
    shape = t[f"shape_{side}"]
    return "-" if shape is None else f"{t[f'dtype_{side}']} {'×'.join(map(str, shape))}"


def _badness(t: dict[str, Any]) -> float:
    value = read_float(t["rel_l2"])
    return float("inf") if value is None or value != value else value  # NaN sorts first


def _rel(x: Any) -> str:
    value = read_float(x)
    return "-" if value is None else f"{value:.3e}"


def _db(x: Any) -> str:
    value = read_float(x)
    return "-" if value is None else f"{value:.1f}"


@contextmanager
def _progress() -> Iterator[ProgressFn | None]:
    """A transient progress bar on a terminal's stderr; nothing otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("weights-diff", total=None)

        def update(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=name[:40])

        yield update
