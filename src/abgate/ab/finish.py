"""The end of an A/B that a signal (or a kill) may have cut short, completed from its
saved records: ``comparison.json`` (missing, unreadable, or analysed while the A/B had
another status) and the three reports (missing, torn, or rendered before a later
decision). Idempotent: a finished A/B is left byte for byte as it is. The ledger entry
is the last part (``ledger.finish``)."""

from __future__ import annotations

from pathlib import Path

from abgate.ab.analyze import COMPARISON_FILE, analyze
from abgate.ab.experiment import Experiment
from abgate.ab.state import AB_FILE
from abgate.errors import AbgateError
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import AbRecord
from abgate.report import refresh_reports
from abgate.runner.complete import checked_complete
from abgate.runner.documents import read_document, read_record
from abgate.runner.spec import prepare


def comparison_current(out: Path, status: str) -> bool:
    """Whether ``comparison.json`` holds a verdict analysed at ``status``."""
    path = out / COMPARISON_FILE
    if not path.is_file():
        return False
    try:
        doc = read_document(path, ComparisonDoc)
    except (OSError, AbgateError):  # damaged or cut short: analysed again
        return False
    return doc.exit_code is not None and doc.ab_status == status


def finish_ab(out: Path) -> list[str]:
    """Complete the finishing of the A/B in ``out`` (one that is still ``running`` is
    not finished: ``--resume`` runs it); returns the names of the files written."""
    doc = read_record(out / AB_FILE, "ab", model=AbRecord)
    if doc.status == "running":
        return []
    done = []
    if not comparison_current(out, str(doc.status)):
        analyze(out)
        done.append(COMPARISON_FILE)
    return done + refresh_reports(out)


def check_complete_ab(out: Path, exp: Experiment) -> None:
    """Every arm's samples of the complete A/B in ``out`` (``exp``: as recorded) checked
    as ``--resume`` checks a complete run's (a damaged line: a UsageError naming
    file:line), before its verdict is shown or its finishing completed."""
    for arm, config in exp.arms.items():
        checked_complete(out / "arms" / arm, prepare(config), require_all=False)
