"""Small terminal renderings shared by commands. Text from a record or a model is
printed through :func:`shown` (its control characters, ANSI escapes and bidi overrides
written visibly: ``\\x1b``, ``<U+202E>``) and, for rich, :func:`markup` (also escaped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from abgate.report.untrusted import plain


def shown(text: Any) -> str:
    """``text`` as a terminal may print it: nothing in it is a control character."""
    return plain(str(text))


def markup(text: Any) -> str:
    """``text`` for rich: shown visibly and its ``[...]`` markup escaped."""
    return escape(shown(text))


def _fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_run_summary(out: Path, status: str, summary: dict[str, Any]) -> None:
    q, s = summary.get("quality", {}), summary.get("speed", {})
    table = Table(title=markup(f"{out}  [{status}]"), show_header=True)
    for col in ("samples", "accuracy", "invalid", "truncated", "errors",
                "decode tok/s (median)", "TTFT ms (median)"):
        table.add_column(col)
    acc = q.get("accuracy")
    se = q.get("accuracy_se")
    dec = s.get("steady_decode_tps", {})
    ttft = s.get("ttft_s", {})
    table.add_row(
        str(summary.get("n", 0)),
        "-" if acc is None else f"{acc:.3f} ± {_fmt(se, '.3f')}",
        _fmt(q.get("invalid_rate"), ".3f"),
        _fmt(q.get("truncated_rate"), ".3f"),
        str(q.get("n_error", 0)),
        _fmt(dec.get("median")),
        "-" if ttft.get("median") is None else f"{ttft['median'] * 1000:.1f}",
    )
    Console(stderr=False).print(table)
