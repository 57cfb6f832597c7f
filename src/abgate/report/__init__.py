"""Reports rendered from saved results only (placeholder until the renderers land)."""

from __future__ import annotations

import json
from pathlib import Path


def write_reports(out: Path) -> list[Path]:
    data = json.loads((out / "comparison.json").read_text())
    path = out / "report.json"
    path.write_text(json.dumps(data, indent=2))
    return [path]
