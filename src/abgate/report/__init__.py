"""Reports of an A/B directory, rendered from its saved records only.

``render(out, fmt)`` returns one report as text (``md``, ``json`` or ``html``);
``write_reports(out)`` writes ``report.md``, ``report.json`` and ``report.html`` into
the A/B directory (``write_text_atomic``: whole or not at all, as every report file
abgate writes: ``abgate report -o``, the CI outputs). Nothing depends on when the report
is rendered: the same records always give the same bytes. See ``docs/reports.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from abgate import safefs, signals
from abgate.errors import UsageError, did_you_mean
from abgate.report.agreement_plots import kld_plot
from abgate.report.blocks import Doc
from abgate.report.compare_sections import comparison_sections, outliers
from abgate.report.contract import matched_contract
from abgate.report.html import render_html
from abgate.report.jsondoc import render_json
from abgate.report.limits import not_certified
from abgate.report.load import AbData, load_ab
from abgate.report.markdown import render_markdown
from abgate.report.plots import all_plots
from abgate.report.review import differences_section, health_counts_section, source_section
from abgate.report.sections import (
    arm_tables,
    bench_section,
    contract_section,
    headline,
    setup,
    weights_section,
)
from abgate.report.untrusted import user

__all__ = ["FORMATS", "build_doc", "check_format", "refresh_reports", "render", "render_data",
           "write_reports", "write_text_atomic"]

FILES = {"md": "report.md", "json": "report.json", "html": "report.html"}
FORMATS = tuple(FILES)


def build_doc(data: AbData, *, plots: bool = True) -> Doc:
    """The report as blocks; ``plots=False`` skips drawing (Markdown has none)."""
    name = data.record.experiment.name or "unnamed"
    decision = data.analysis.decision
    doc = Doc(title=f"abgate A/B report: {user(name)}",
              decision="n/a" if decision is None else decision)
    overview, per_arm = all_plots(data) if plots else ([], {})
    doc.add(*headline(data), *setup(data), *source_section(data),
            *contract_section(data, matched_contract(data)), *differences_section(data),
            *arm_tables(data), *health_counts_section(data), *overview, *bench_section(data),
            *weights_section(data))
    for k, arm in enumerate(data.candidates, start=1):
        kld = kld_plot(data, arm, k) if plots else None
        doc.add(*comparison_sections(data, arm, per_arm.get(arm, []), kld))
    doc.add(*outliers(data), *not_certified(data))
    return doc


RENDERERS: dict[str, Callable[[AbData], str]] = {
    "md": lambda data: render_markdown(build_doc(data, plots=False)),
    "json": render_json,
    "html": lambda data: render_html(build_doc(data)),
}


def check_format(fmt: str) -> None:
    if fmt not in RENDERERS:
        raise UsageError(f"unknown report format {fmt!r}; choose md, json or html"
                         + did_you_mean(fmt, RENDERERS))


def render_data(data: AbData, fmt: str) -> str:
    check_format(fmt)
    return RENDERERS[fmt](data)


def render(out: Path, fmt: str) -> str:
    """One report of the A/B directory ``out`` as text."""
    check_format(fmt)
    return render_data(load_ab(out), fmt)


def write_reports(out: Path) -> list[Path]:
    """Write report.md, report.json and report.html into ``out``; return their paths.
    All three are rendered from one reading of the records (one decisions read), each
    written atomically."""
    refresh_reports(out, only_stale=False)
    return [out / name for name in FILES.values()]


def refresh_reports(out: Path, *, only_stale: bool = True) -> list[str]:
    """Render the three reports from one reading of ``out``'s records and write those
    whose bytes on disk differ (missing, torn by a kill, or rendered before a later
    decision); returns the names written. The same records give the same bytes, so a
    current report is never rewritten."""
    data = load_ab(out)
    texts = {name: render_data(data, fmt) for fmt, name in FILES.items()}
    written = []
    for name, text in texts.items():
        if only_stale and _holds(out / name, text):
            continue
        write_text_atomic(out / name, text)
        written.append(name)
        signals.pause_point("reports")  # tests: a signal between two reports
    return written


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all, no temporary file left on any error
    (a directory of that name, a full disk): a one-line error naming ``path``."""
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"cannot write {path}: it is a directory (give a file name)")
    safefs.write_atomic(path, text.encode("utf-8"))


def _holds(path: Path, text: str) -> bool:
    try:
        return path.read_bytes() == text.encode("utf-8")
    except OSError:
        return False
