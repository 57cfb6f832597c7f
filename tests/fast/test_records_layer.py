"""The record models are base-level: ``abgate.records`` imports no abgate package above
base (compare/, scoring/, engines/, inputs, runner/, workflows, cli/), so every layer may
import it."""

from __future__ import annotations

import ast
from pathlib import Path

RECORDS = Path(__file__).resolve().parents[2] / "src" / "abgate" / "records"
ABOVE = {"compare", "scoring", "engines", "suites", "provenance", "weights", "runner",
         "bench", "baseline", "ab", "report", "ledger", "verify", "cli"}


def _abgate_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n for n in found if n.startswith("abgate.")}


def test_records_import_nothing_above_base() -> None:
    modules = sorted(RECORDS.glob("*.py"))
    assert len(modules) >= 3
    upward = {f"{p.name}: {name}" for p in modules for name in _abgate_imports(p)
              if name.split(".")[1] in ABOVE}
    assert not upward, sorted(upward)
