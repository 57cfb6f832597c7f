"""A/A false failures of the suites gate with Holm, over many simulated A/As.

Each trial is one experiment of ``--suites`` suites (default 3, as GSM8K, the synthetic
suite and a user's JSONL), ``--items`` items each, whose two arms are exchangeable (an
exact null): per item a difficulty p ~ Beta(2, 2); arm A's answer is right with
probability p, arm B's is A's own with probability 1 - q (q: ``--discordance``) and
otherwise drawn afresh with the same p; invalid and truncated answers likewise at 10%
and 5%; decode speed is a per-item base rate times heavy-tailed per-request noise
(Student-t with 3 degrees of freedom, scale ``--speed-noise`` in log units). Every suite
goes through the real pipeline (``compare_samples`` + ``decide``) and the suites are
combined by ``abgate.compare.holm.combine``. A REJECT is a false failure.

Counted per policy: the suites' one verdict without adjustment (REJECT when any suite
rejects) and with Holm, each with its exact 95% interval. The zero-margin policy
(margins 0, ``min_items`` 2) puts every gate at its nominal level, the worst case for
multiplicity.

    PYTHONPATH=src python benchmarks/holm_aa.py --trials 1000 --items 100
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from abgate.compare import compare_samples, decide
from abgate.compare.holm import SuiteOutcome, combine
from abgate.compare.policy import Policy, load_policy

ZERO_MARGIN = """min_items = 2
[speed]\nmin_speedup = 0.0\nmax_slowdown = 0.0\n[quality]
max_accuracy_drop = 0.0\nmax_invalid_increase = 0.0\nmax_truncated_increase = 0.0
max_error_increase = 0.0\nmax_repetition_increase = 0.0\n"""


def _sample(item: int, correct: bool, invalid: bool, truncated: bool, tps: float,
            rep: float) -> dict[str, Any]:
    return {"key": f"i{item}#0", "item_id": f"i{item}", "seed": 0, "finish_reason":
            "length" if truncated else "stop", "correct": bool(correct and not invalid),
            "health": {"invalid": bool(invalid), "truncated": bool(truncated),
                       "natural_stop": not truncated, "seq_rep_4": rep, "error": False},
            "timing": {"steady_decode_tps": tps, "prefill_tps": tps * 10, "ttft_s": 1 / tps},
            "output": {"tokens": 64}}


def _pair_flag(rng: np.random.Generator, p: np.ndarray, q: float) -> tuple[np.ndarray, ...]:
    a = rng.random(p.size) < p
    fresh = rng.random(p.size) < p
    b = np.where(rng.random(p.size) < q, fresh, a)
    return a, b


def simulate_suite(rng: np.random.Generator, n: int, q: float,
                   noise: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two exchangeable arms of ``n`` items."""
    p = rng.beta(2, 2, n)
    acc = _pair_flag(rng, p, q)
    inv = _pair_flag(rng, np.full(n, 0.10), q)
    trunc = _pair_flag(rng, np.full(n, 0.05), q)
    base = 40 * np.exp(rng.normal(0, 0.3, n))
    tps = [base * np.exp(noise * rng.standard_t(3, n)) for _ in range(2)]
    rep = [np.clip(rng.normal(0.05, 0.02, n), 0, 1) for _ in range(2)]
    arms = [[_sample(i, acc[k][i], inv[k][i], trunc[k][i], float(tps[k][i]), float(rep[k][i]))
             for i in range(n)] for k in range(2)]
    return arms[0], arms[1]


def trial(rng: np.random.Generator, policy: Policy, suites: int, n: int, q: float,
          noise: float, n_boot: int, seed: int) -> tuple[bool, bool]:
    """(unadjusted REJECT, Holm REJECT) of one simulated A/A experiment."""
    outcomes = []
    for s in range(suites):
        a, b = simulate_suite(rng, n, q, noise)
        c = compare_samples(a, b, seed=seed, n_boot=n_boot, arm_names=("a", "b"),
                            confidence=policy.speed.confidence)
        outcomes.append(SuiteOutcome(f"s{s}", "b", c, decide(c, policy), policy))
    unadjusted = any(o.verdict.decision == "REJECT" for o in outcomes)
    return unadjusted, combine(outcomes, policy.quality.alpha).decision == "REJECT"


def _rate(hits: int, n: int) -> str:
    low = stats.beta.ppf(0.025, hits, n - hits + 1) if hits else 0.0
    high = stats.beta.ppf(0.975, hits + 1, n - hits) if hits < n else 1.0
    return f"{100 * hits / n:.1f}% ({100 * low:.1f}-{100 * high:.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--items", type=str, default="100")
    ap.add_argument("--suites", type=int, default=3)
    ap.add_argument("--discordance", type=float, default=0.2)
    ap.add_argument("--speed-noise", type=float, default=0.05)
    ap.add_argument("--n-boot", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        zero = Path(tmp) / "zero-margin.toml"
        zero.write_text(ZERO_MARGIN)
        policies = {"default": load_policy(None), "zero-margin": load_policy(zero)}
    rows = []
    print("| policy | suites x items | trials | any suite REJECTs (no adjustment) | "
          "Holm REJECT |")
    print("| --- | --- | ---: | --- | --- |")
    for name, policy in policies.items():
        for n in (int(x) for x in args.items.split(",")):
            rng = np.random.default_rng([args.seed, n])
            hits = [trial(rng, policy, args.suites, n, args.discordance, args.speed_noise,
                          args.n_boot, t) for t in range(args.trials)]
            raw, holm = sum(h[0] for h in hits), sum(h[1] for h in hits)
            rows.append({"policy": name, "items": n, "suites": args.suites,
                         "trials": args.trials, "unadjusted": raw, "holm": holm})
            print(f"| {name} | {args.suites} x {n} | {args.trials} | "
                  f"{_rate(raw, args.trials)} | {_rate(holm, args.trials)} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
