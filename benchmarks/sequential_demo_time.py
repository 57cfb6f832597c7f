"""Time to verdict of an A/B, fixed-N against sequential, measured in one invocation.

Runs the experiment on this machine in pairs, one right after the other: once with
``[schedule] stopping = "fixed"`` (every item, then scoring) and once with
``stopping = "sequential"`` (looks after every ``--look-every`` items, stop when the
verdict is certain), each from scratch into its own directory, and prints both wall
times (process start to verdict), both verdicts, the items each ran and the ratio
sequential / fixed. ``--repeats N`` runs N pairs, alternating which design goes first
(F S, S F, ...), and reports every pair's ratio with their median and range, so that a
change of the host's load between the two runs of one pair shows as spread.
Default: the README demo::

    PYTHONPATH=src python benchmarks/sequential_demo_time.py \\
        [examples/smollm2-threads.toml] [--out /tmp/demo-time] [--look-every 1] \\
        [--repeats 1] [--json F]

Both runs of a pair share the host's load at the time; run it on an idle machine, and
repeat it, before quoting the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEMO = Path(__file__).resolve().parent.parent / "examples" / "smollm2-threads.toml"


def run(experiment: Path, out: Path, extra: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "abgate", "ab", str(experiment), "-o",
                           str(out), "--force", *extra], capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"abgate ab exited {proc.returncode}: {proc.stderr[-2000:]}")
    comp = json.loads((out / "comparison.json").read_text())
    first = next(iter(comp["comparisons"].values()))
    seq = first["comparison"].get("sequential") or {}
    n = first["comparison"]["n_items"]
    return {"seconds": seconds, "decision": comp["decision"],
            "n_items": seq.get("n_items", n), "stopped_early": seq.get("stopped_early"),
            "decided_by": seq.get("decided_by")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", type=Path, nargs="?", default=DEMO)
    p.add_argument("--out", type=Path, default=Path("/tmp/sequential-demo-time"))
    p.add_argument("--look-every", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    pairs = []
    for i in range(args.repeats):
        order = ["fixed", "sequential"] if i % 2 == 0 else ["sequential", "fixed"]
        pair = {design: _one(design, args, i) for design in order}
        pair["ratio"] = pair["sequential"]["seconds"] / pair["fixed"]["seconds"]
        pair["first"] = order[0]
        pairs.append(pair)
        _print(pair)
    ratios = sorted(p["ratio"] for p in pairs)
    median = ratios[len(ratios) // 2] if len(ratios) % 2 else \
        (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
    print(f"time to verdict, sequential / fixed: median {median:.2f} over {len(pairs)} "
          f"pair(s), range {ratios[0]:.2f} to {ratios[-1]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"experiment": str(args.experiment), "pairs": pairs,
                                         "median_ratio": median}, indent=1) + "\n")
    return 0


def _one(design: str, args: argparse.Namespace, i: int) -> dict[str, Any]:
    flags = ["--fixed-n"] if design == "fixed" else \
        ["--sequential", "--look-every", str(args.look_every)]
    return run(args.experiment, args.out / f"{design}-{i}", flags)


def _print(pair: dict[str, Any]) -> None:
    for design in ("fixed", "sequential"):
        r = pair[design]
        early = f" (stopped early: {r['stopped_early']}, decided by {r['decided_by']})" \
            if design == "sequential" else ""
        print(f"{design:<11} {r['seconds']:.1f} s, {r['decision']}, {r['n_items']} items{early}")
    print(f"  ratio sequential / fixed: {pair['ratio']:.2f} ({pair['first']} ran first)")


if __name__ == "__main__":
    sys.exit(main())
