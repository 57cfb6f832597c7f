"""Small terminal renderings shared by commands. Text from a record or a model is
printed through :func:`shown` (its control characters, ANSI escapes and bidi overrides
written visibly: ``\\x1b``, ``<U+202E>``) and, for rich, :func:`markup` (also escaped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from abgate.records.sections import Distribution, QualitySummary
from abgate.records.side_documents import Summary
from abgate.report.untrusted import plain


def shown(text: Any) -> str:
    """``text`` as a terminal may print it: nothing in it is a control character."""
    return plain(str(text))


def markup(text: Any) -> str:
    """``text`` for rich: shown visibly and its ``[...]`` markup escaped."""
    return escape(shown(text))


def _fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_run_summary(out: Path, status: str, summary: Summary | None) -> None:
    summary = summary or Summary.new(n=0, quality=QualitySummary(), speed={})
    q, rates = summary.quality, summary.quality.model_extra or {}  # rates: the free keys
    table = Table(title=markup(f"{out}  [{status}]"), show_header=True)
    for col in ("samples", "accuracy", "invalid", "truncated", "errors",
                "decode tok/s (median)", "TTFT ms (median)"):
        table.add_column(col)
    dec = summary.speed.get("steady_decode_tps") or Distribution()
    ttft = (summary.speed.get("ttft_s") or Distribution()).median
    table.add_row(
        str(summary.n),
        "-" if q.accuracy is None else f"{q.accuracy:.3f} ± {_fmt(q.accuracy_se, '.3f')}",
        _fmt(rates.get("invalid_rate"), ".3f"),
        _fmt(rates.get("truncated_rate"), ".3f"),
        str(q.n_error or 0),
        _fmt(dec.median),
        "-" if ttft is None else f"{ttft * 1000:.1f}",
    )
    Console(stderr=False).print(table)
