"""A/A calibration: how often does abgate ACCEPT or REJECT two identical arms?

Input: two recorded runs of the *same* configuration (a sequential A/A pair), or one
greedy run with two seeds, whose seeds become the two arms (each item runs once per
seed, back to back: an interleaved A/A pair), e.g.::

    python -m abgate run --suite synthetic --limit 40 --max-tokens 128 -o /tmp/aa_src
    python -m abgate run --suite synthetic --limit 40 --max-tokens 128 -o /tmp/aa_src2
    python -m abgate run --suite synthetic --limit 40 --max-tokens 128 --seeds 0,1 \\
        -o /tmp/aa_inter

Each trial builds a simulated A/A experiment of ``n`` items by resampling the recorded
items with replacement and runs the full pipeline (``compare_samples`` + ``decide``)
on it. Three noise models:

- ``swap`` (the null, exactly): for each drawn item a fair coin decides which recorded
  run is arm A. Arms are exchangeable, so every ACCEPT or REJECT is a false positive;
  the speed noise is the real request-to-request and run-to-run noise of this machine.
- ``recorded``: no coin; arm A is always the first run. Any real drift between the two
  sequential runs (thermal, other load) stays in, as it would in a sequential A/B.
- ``lognormal``: both arms take the first run's records with the decode tok/s
  multiplied by independent ``exp(sigma * N(0, 1))``; sigma is estimated from the
  recorded pairs (sd of the log ratios / sqrt 2) unless ``--sigma`` gives it.

Outputs of greedy A/A arms are token-identical, so the quality gates pass; the speed
gate is what is being calibrated. Run from the repository root::

    PYTHONPATH=src python benchmarks/aa_calibration.py /tmp/aa_src /tmp/aa_src2 \\
        [--trials 1000] [--items 30,40,100] [--seed 0] [--sigma S] [--models swap,...]
        [--json out.json]
    PYTHONPATH=src python benchmarks/aa_calibration.py /tmp/aa_inter --split-seeds 0,1

It prints the real A/A verdict, then a table of ACCEPT/REJECT rates per model, items
and policy, with a Clopper-Pearson 95% interval. Policies: the shipped default;
"zero-margin" (min_speedup = max_slowdown = 0, min_items = 2), which exposes the bare
95% decision interval; and "zero-margin, percentile CI only", the same with the
decode interval cut back to the plain percentile bootstrap (no Student-t widening).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from abgate.compare import Policy, compare_samples, decide, load_policy

Record = dict[str, Any]
MODELS = ("swap", "recorded", "lognormal")
BARE = "zero-margin, percentile CI only"


def read_run(run_dir: Path) -> dict[str, Record]:
    """Non-warm-up records of a run directory, by key."""
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return {r["key"]: r for r in records if not r.get("warmup")}


def split_seeds(run: Mapping[str, Record], seeds: tuple[int, int]
                ) -> tuple[dict[str, Record], dict[str, Record]]:
    """One run's two seeds as two arms, matched by item (greedy: same outputs).

    A run executes each item once per seed, back to back, so the two seeds of an item
    are measured seconds apart: the interleaved (ABAB) schedule of an A/A experiment.
    """
    arms: tuple[dict[str, Record], dict[str, Record]] = ({}, {})
    for record in run.values():
        for arm, seed in zip(arms, seeds, strict=True):
            if record.get("seed") == seed:
                key = f"{record['item_id']}#0"
                arm[key] = {**record, "key": key, "seed": 0}
    return arms


def group_by_item(keys: Sequence[str], run: Mapping[str, Record]) -> list[list[str]]:
    items: dict[str, list[str]] = {}
    for key in keys:
        items.setdefault(str(run[key]["item_id"]), []).append(key)
    return [sorted(group) for _, group in sorted(items.items())]


def relabel(record: Record, index: int, tps: float | None = None) -> Record:
    item_id = f"t{index:05d}"
    out = {**record, "item_id": item_id, "key": f"{item_id}#{record.get('seed', 0)}"}
    if tps is not None:
        out["timing"] = {**record["timing"], "steady_decode_tps": tps}
    return out


def decode_sigma(run1: Mapping[str, Record], run2: Mapping[str, Record],
                 keys: Sequence[str]) -> float:
    """Per-measurement log-noise: sd of the paired log ratios / sqrt(2)."""
    ratios = [math.log(run2[k]["timing"]["steady_decode_tps"]
                       / run1[k]["timing"]["steady_decode_tps"])
              for k in keys if run1[k]["timing"].get("steady_decode_tps")
              and run2[k]["timing"].get("steady_decode_tps")]
    return float(np.std(ratios, ddof=1) / math.sqrt(2.0))


def trial_arms(model: str, run1: Mapping[str, Record], run2: Mapping[str, Record],
               items: Sequence[Sequence[str]], n_items: int, sigma: float,
               rng: np.random.Generator) -> tuple[list[Record], list[Record]]:
    """One simulated A/A experiment of ``n_items`` resampled items."""
    chosen = rng.integers(0, len(items), size=n_items)
    flips = rng.random(n_items) < 0.5
    arm_a: list[Record] = []
    arm_b: list[Record] = []
    for index, (item, flip) in enumerate(zip(chosen, flips, strict=True)):
        for key in items[item]:
            first, second = run1[key], run2[key]
            if model == "swap" and flip:
                first, second = second, first
            if model == "lognormal":
                base = first["timing"].get("steady_decode_tps")
                noise = np.exp(sigma * rng.normal(size=2)) if base else (None, None)
                arm_a.append(relabel(first, index, base and float(base * noise[0])))
                arm_b.append(relabel(first, index, base and float(base * noise[1])))
            else:
                arm_a.append(relabel(first, index))
                arm_b.append(relabel(second, index))
    return arm_a, arm_b


def zero_margin(policy: Policy) -> Policy:
    speed = dataclasses.replace(policy.speed, min_speedup=0.0, max_slowdown=0.0)
    return dataclasses.replace(policy, name="zero-margin", min_items=2, speed=speed)


def percentile_only(comparison: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison with the decode interval cut back to the bare percentile bootstrap
    (no Student-t widening), to show what the widening buys."""
    speed = comparison["speed"]["steady_decode_tps"]
    log_ratio = {**speed["log_ratio"], "ci": speed["log_ratio"]["ci_bootstrap"]}
    return {**comparison,
            "speed": {**comparison["speed"], "steady_decode_tps": {**speed,
                                                                   "log_ratio": log_ratio}}}


def rate_row(model: str, n_items: int, policy: str, counts: Counter[str],
             trials: int) -> dict[str, Any]:
    false_pos = counts["ACCEPT"] + counts["REJECT"]
    interval = stats.binomtest(false_pos, trials).proportion_ci(confidence_level=0.95)
    return {"model": model, "items": n_items, "policy": policy, "trials": trials,
            "accept": counts["ACCEPT"] / trials, "reject": counts["REJECT"] / trials,
            "false_positive": false_pos / trials,
            "ci": [float(interval.low), float(interval.high)]}


def calibrate(run1: Mapping[str, Record], run2: Mapping[str, Record], *, trials: int,
              sizes: Sequence[int], seed: int, sigma: float | None,
              models: Sequence[str] = MODELS) -> list[dict[str, Any]]:
    keys = sorted(set(run1) & set(run2))
    items = group_by_item(keys, run1)
    if sigma is None:
        sigma = decode_sigma(run1, run2, keys)
    policies = {"default": load_policy(None)}
    policies["zero-margin"] = zero_margin(policies["default"])
    rows = []
    for model in models:
        for n_items in sizes:
            rng = np.random.default_rng([seed, MODELS.index(model), n_items])
            counts: dict[str, Counter[str]] = {name: Counter() for name in [*policies, BARE]}
            for trial in range(trials):
                arm_a, arm_b = trial_arms(model, run1, run2, items, n_items, sigma, rng)
                comparison = compare_samples(arm_a, arm_b, seed=trial)
                for name, policy in policies.items():
                    counts[name][decide(comparison, policy).decision] += 1
                bare = decide(percentile_only(comparison), policies["zero-margin"])
                counts[BARE][bare.decision] += 1
            rows += [rate_row(model, n_items, name, counts[name], trials) for name in counts]
            print(f"  {model:9} {n_items:4} items done", file=sys.stderr)
    return rows


def real_verdict(run1: Mapping[str, Record], run2: Mapping[str, Record]) -> dict[str, Any]:
    keys = sorted(set(run1) & set(run2))
    comparison = compare_samples([run1[k] for k in keys], [run2[k] for k in keys])
    verdict = decide(comparison, load_policy(None))
    speed = comparison["speed"]["steady_decode_tps"]
    return {"decision": verdict.decision, "reasons": list(verdict.reasons),
            "identical_outputs": comparison["diagnostics"]["identical_outputs"]["text"],
            "decode_ratio": speed["ratio"], "sigma": decode_sigma(run1, run2, keys),
            "n_items": comparison["n_items"]}


def print_table(rows: Sequence[Mapping[str, Any]]) -> None:
    print("| model | items | policy | ACCEPT | REJECT | false positive (95% CI) |")
    print("|---|---:|---|---:|---:|---|")
    for r in rows:
        print(f"| {r['model']} | {r['items']} | {r['policy']} | {r['accept']:.1%} | "
              f"{r['reject']:.1%} | {r['false_positive']:.1%} "
              f"({r['ci'][0]:.1%}-{r['ci'][1]:.1%}) |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run1", type=Path)
    parser.add_argument("run2", type=Path, nargs="?",
                        help="second A/A run (omit with --split-seeds)")
    parser.add_argument("--split-seeds", metavar="S0,S1",
                        help="one run, its seeds S0 and S1 as the two arms (interleaved)")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--items", default="30,40,100")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of " + ", ".join(MODELS))
    parser.add_argument("--sigma", type=float,
                        help="lognormal model's per-request log-noise (default: measured)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.split_seeds:
        s0, s1 = (int(seed) for seed in args.split_seeds.split(","))
        run1, run2 = split_seeds(read_run(args.run1), (s0, s1))
    elif args.run2 is not None:
        run1, run2 = read_run(args.run1), read_run(args.run2)
    else:
        parser.error("give two run directories, or one with --split-seeds")
    real = real_verdict(run1, run2)
    print(f"real A/A ({real['n_items']} items, outputs identical {real['identical_outputs']},"
          f" decode ratio {real['decode_ratio']['estimate']:.4f} "
          f"[{real['decode_ratio']['ci'][0]:.4f}, {real['decode_ratio']['ci'][1]:.4f}], "
          f"per-request noise sigma {real['sigma']:.3f}): {real['decision']}")
    start = time.perf_counter()
    sizes = [int(size) for size in args.items.split(",")]
    models = [model for model in args.models.split(",") if model]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    rows = calibrate(run1, run2, trials=args.trials, sizes=sizes, seed=args.seed,
                     sigma=args.sigma, models=models)
    print_table(rows)
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"real": real, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
