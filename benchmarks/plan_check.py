"""Check ``abgate plan`` against simulation, and set its GSM8K MDE against TensorRT-LLM's.

For a recorded A/B (``AB_DIR``: its ``comparison.json`` and its arms' samples) the plan
states, per gate, the true effect it detects with ``power`` at N items
(``abgate.compare.plan``). This script resamples the recorded run's per-item paired
differences (N items drawn with replacement, shifted so that the true effect is exactly
the stated one: a location-shift bootstrap) and applies the gate's own rule to each
trial: accuracy fails when d̄ + z₁₋α·SE < −max_accuracy_drop, speed when the mean log
ratio + z·SE < ln(1 − max_slowdown). The share of trials that fail is the power the
plan's MDE actually has on this run's noise; the acceptance is ±5 points of the stated
power.

It also states the paired accuracy MDE at n = 1,319 (all of GSM8K's test split) at
TensorRT-LLM's α = 0.05 one-sided and 80% power, from the recorded run's discordance,
against TensorRT-LLM's stated 4.8 points (unpaired, σ = 50 points per arm, no margin)
and against the unpaired MDE at the recorded arms' own accuracies (what pairing alone
buys, the rest being the accuracy level).

    PYTHONPATH=src python benchmarks/plan_check.py \\
        benchmarks/results/gpu/vllm/ab-fp8/ab --arm fp8 --items 1319 --trials 4000
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from abgate.compare.plan import GateSpec, gate_specs, mde_at
from abgate.compare.policy import Policy, load_policy
from abgate.compare.stats import z_one_sided
from abgate.records.comparison import Comparison, ComparisonDoc

TRT_MDE, TRT_N, TRT_ALPHA = 0.048, 1319, 0.05


@dataclass(frozen=True)
class Check:
    gate: str
    n_items: int
    stated_power: float
    simulated_power: float
    detectable: float
    trials: int


def _samples(path: Path) -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["key"]: r for r in rows if not r.get("warmup")}


def per_item(ab: Path, base: str, arm: str, metric: str) -> dict[str, np.ndarray]:
    """Per item: the paired accuracy difference and the mean log speed ratio B/A."""
    a, b = _samples(ab / "arms" / base / "samples.jsonl"), _samples(ab / "arms" / arm /
                                                                    "samples.jsonl")
    acc: dict[str, list[float]] = {}
    speed: dict[str, list[float]] = {}
    for key, sa in a.items():
        sb = b.get(key)
        if sb is None or "error" in (sa["finish_reason"], sb["finish_reason"]):
            continue
        item = str(sa["item_id"])
        if sa.get("correct") is not None and sb.get("correct") is not None:
            acc.setdefault(item, []).append(float(bool(sb["correct"])) -
                                            float(bool(sa["correct"])))
        ta, tb = sa["timing"].get(metric), sb["timing"].get(metric)  # type: ignore[union-attr]
        if isinstance(ta, float | int) and isinstance(tb, float | int) and ta > 0 and tb > 0:
            speed.setdefault(item, []).append(math.log(tb / ta))
    return {"accuracy": np.array([np.mean(v) for v in acc.values()]),
            "speed": np.array([np.mean(v) for v in speed.values()])}


def _truth(spec: GateSpec, detectable: float) -> float:
    """The per-item mean that puts the truth exactly at ``detectable``."""
    if spec.name == "speed":
        return math.log1p(-detectable)  # a slowdown: the log ratio
    return -detectable  # an accuracy drop: the difference B - A


def simulate(values: np.ndarray, spec: GateSpec, policy: Policy, n_items: int,
             trials: int, seed: int = 0) -> Check:
    """Share of ``trials`` in which the gate fails a true effect at the stated MDE."""
    at = mde_at(spec, n_items, policy.power)
    assert at.detectable is not None
    rng = np.random.default_rng(seed)
    centred = values - values.mean() + _truth(spec, at.detectable)
    draws = centred[rng.integers(0, values.size, size=(trials, n_items))]
    mean = draws.mean(axis=1)
    se = draws.std(axis=1, ddof=0 if spec.name == "accuracy" else 1) / math.sqrt(n_items)
    if spec.name == "speed":
        fails = mean + spec.z * se < math.log1p(-policy.speed.max_slowdown)
    else:
        fails = mean + spec.z * se < -policy.quality.max_accuracy_drop
    return Check(spec.name, n_items, policy.power, float(fails.mean()), at.detectable, trials)


def recorded(ab: Path, arm: str | None) -> tuple[Comparison, str, str]:
    doc = ComparisonDoc.model_validate(json.loads((ab / "comparison.json").read_text()))
    arm = arm or next(iter(doc.comparisons))
    return doc.comparisons[arm].comparison, str(doc.baseline), arm


def check_run(ab: Path, arm: str | None, n_items: int, trials: int,
              policy: Policy) -> list[Check]:
    comparison, base, arm = recorded(ab, arm)
    values = per_item(ab, base, arm, policy.speed.metric)
    return [simulate(values[s.name], s, policy, n_items, trials)
            for s in gate_specs(comparison, policy) if s.name in values]


def trt_comparison(comparison: Comparison, n: int = TRT_N, alpha: float = TRT_ALPHA,
                   power: float = 0.8) -> dict[str, float]:
    """The paired and unpaired accuracy MDE at ``n`` items, TRT-LLM's alpha and power."""
    acc = comparison.quality.accuracy
    k = int(acc.n_items or 0)
    z = z_one_sided(alpha) + z_one_sided(1.0 - power)
    sigma_d = float(acc.diff.se or 0.0) * math.sqrt(k)
    sigma_u = math.hypot(float(acc.a.se or 0.0), float(acc.b.se or 0.0)) * math.sqrt(k)
    return {"n": n, "alpha": alpha, "power": power, "items_recorded": k,
            "discordant": int(acc.mcnemar.n_discordant or 0),
            "accuracy_a": float(acc.a.estimate or 0.0),
            "accuracy_b": float(acc.b.estimate or 0.0), "paired": z * sigma_d / math.sqrt(n),
            "unpaired_same_accuracy": z * sigma_u / math.sqrt(n),
            "trt_unpaired_worst_case": TRT_MDE}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ab", type=Path)
    ap.add_argument("--arm")
    ap.add_argument("--items", type=int, default=TRT_N)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--policy")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    policy = load_policy(args.policy)
    checks = check_run(args.ab, args.arm, args.items, args.trials, policy)
    print(f"| gate | N | stated MDE (detectable) | stated power | simulated power "
          f"({args.trials} trials) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for c in checks:
        print(f"| {c.gate} | {c.n_items} | {c.detectable:.4f} | {c.stated_power:.0%} | "
              f"{c.simulated_power:.1%} |")
    comparison, _, _ = recorded(args.ab, args.arm)
    trt = trt_comparison(comparison)
    print(f"\nGSM8K at n = {TRT_N}, alpha {TRT_ALPHA} one-sided, power 80%: paired MDE "
          f"{100 * trt['paired']:.2f} points (from {trt['discordant']} discordant of "
          f"{trt['items_recorded']} recorded pairs); unpaired at the same accuracies "
          f"{100 * trt['unpaired_same_accuracy']:.2f}; TensorRT-LLM (unpaired, sigma 50) "
          f"{100 * TRT_MDE:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"checks": [vars(c) for c in checks], "trt": trt},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
