"""Time to verdict of an A/B, fixed-N against sequential, measured in one invocation.

Runs the experiment twice on this machine, one right after the other: once with
``[schedule] stopping = "fixed"`` (every item, then scoring) and once with
``stopping = "sequential"`` (looks after every ``--look-every`` items, stop when the
verdict is certain), each from scratch into its own directory, and prints both wall
times (process start to verdict), both verdicts, the items each ran and the ratio
sequential / fixed. Default: the README demo::

    PYTHONPATH=src python benchmarks/sequential_demo_time.py \\
        [examples/smollm2-kv-q8.toml] [--out /tmp/demo-time] [--look-every 1] [--json F]

Both runs share the host's load at the time; run it on an idle machine, or repeat it,
before quoting the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEMO = Path(__file__).resolve().parent.parent / "examples" / "smollm2-kv-q8.toml"


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
    args = p.parse_args()
    fixed = run(args.experiment, args.out / "fixed", ["--fixed-n"])
    seq = run(args.experiment, args.out / "sequential",
              ["--sequential", "--look-every", str(args.look_every)])
    ratio = seq["seconds"] / fixed["seconds"]
    print(f"fixed-N:    {fixed['seconds']:.1f} s, {fixed['decision']}, {fixed['n_items']} items")
    print(f"sequential: {seq['seconds']:.1f} s, {seq['decision']}, {seq['n_items']} items"
          f" (stopped early: {seq['stopped_early']}, decided by {seq['decided_by']})")
    print(f"time to verdict, sequential / fixed: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"fixed": fixed, "sequential": seq, "ratio": ratio},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
