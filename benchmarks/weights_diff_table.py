"""A Markdown table of a weights diff's groups, from the JSON ``abgate weights-diff --json``
writes (the console tables are cut to the terminal's width):

    python benchmarks/weights_diff_table.py RESULT.json [--by kind|layer]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return str(value)


def table(doc: dict[str, object], by: str) -> str:
    groups = doc["groups"]
    assert isinstance(groups, dict)
    rows = groups[f"by_{by}"]
    cols = [by, "n_tensors", "n_elements", "mean_rel_l2", "max_rel_l2", "pooled_rel_l2",
            "pooled_sqnr_db"]
    out = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--by", choices=("kind", "layer"), default="kind")
    args = ap.parse_args()
    print(table(json.loads(args.json.read_text()), args.by))


if __name__ == "__main__":
    main()
