"""Sequential-stopping calibration: replay a recorded A/B under continuous monitoring.

Input: one fixed-N interleaved A/B directory recorded with the arms below (every item
run, distribution agreement scored), e.g. the five-arm experiment in
``benchmarks/sequential_calibration.toml``::

    abgate ab benchmarks/sequential_calibration.toml -o /tmp/seqcal/AB

Each trial draws a sequence of items with replacement from the recorded ones (both
arms' samples and the agreement rows of a drawn item travel together, relabelled so a
drawn item is a new item) and judges it three ways:

- ``sequential``: :func:`abgate.compare.sequential.sequential_section`, looking after
  every item up to ``--max-items``; the decision and the items it took;
- ``fixed``: the fixed-N verdict (``compare_samples`` + ``decide``, the policy's
  ``min_items`` and margins) on the first ``--fixed-n`` items, once;
- ``peeking``: the same fixed-N tests applied after every ``--peek-every`` items from
  ``--peek-from`` on, stopping at the first decided verdict: what a user watching the
  fixed-N report does by hand.

For the identical arm the null is exact: a fair coin per drawn item decides which
recorded arm plays A, so any ACCEPT or REJECT is false, and so is any speed gate that
passes or fails. Run from the repository root::

    PYTHONPATH=src python benchmarks/sequential_calibration.py /tmp/seqcal/AB \\
        [--trials 400] [--max-items 300] [--fixed-n 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from abgate.compare import Policy, compare_samples, decide, load_policy
from abgate.compare.agreement import summarize_agreement
from abgate.compare.sequential import sequential_section

Record = dict[str, Any]
# candidate arm -> (label, expected): the arms of sequential_calibration.toml
ARMS = {"same": ("A/A (identical arm, swapped by a coin per item)", "neither"),
        "q8": ("q8_0 KV + flash attention", "not REJECT"),
        "rope": ("RoPE base 1.0 (broken)", "REJECT"),
        "threads2": ("2 threads vs 1 (a real slowdown on this loaded 2-core host)",
                     "REJECT"),
        "~threads2": ("1 thread vs 2 (the same pairs reversed: a real speedup)", "ACCEPT"),
        # a revision A/B of a no-op commit (benchmarks/gate_wall_time.py, arms base/head):
        # swapped by a coin per item as the identical arm is, so only REJECT is false
        "head": ("no-op revision (arms swapped by a coin per item)", "ACCEPT")}
SWAPPED = ("same", "head")


def read_jsonl(path: Path) -> list[Record]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_item(records: Sequence[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        if not r.get("warmup"):
            out.setdefault(str(r["item_id"]), []).append(r)
    return out


def relabel(records: Sequence[Record], index: int) -> list[Record]:
    item = f"d{index:05d}"
    return [{**r, "item_id": item, "key": f"{item}#{r.get('seed', 0)}"} for r in records]


@dataclasses.dataclass(frozen=True)
class Recorded:
    """One candidate arm's recorded data, per item: baseline, candidate, agreement."""

    items: list[str]
    base: dict[str, list[Record]]
    cand: dict[str, list[Record]]
    rows: dict[str, list[Record]]


def load(ab: Path, base: str, arm: str) -> Recorded:
    """``~arm``: the candidate as A and the baseline as B (its agreement rows kept: they
    are only used for arms whose KL is 0 both ways)."""
    name = arm.lstrip("~")
    b = by_item(read_jsonl(ab / "arms" / base / "samples.jsonl"))
    c = by_item(read_jsonl(ab / "arms" / name / "samples.jsonl"))
    rows = by_item(read_jsonl(ab / "arms" / name / "agreement.jsonl"))
    if arm.startswith("~"):
        b, c = c, b
    items = sorted(set(b) & set(c))
    return Recorded(items, b, c, rows)


def draw(data: Recorded, n: int, rng: np.random.Generator, swap: bool
         ) -> tuple[list[Record], list[Record], list[Record]]:
    """A sequence of ``n`` items drawn with replacement (arms swapped by a coin when
    ``swap``: the exact null of an identical arm)."""
    a: list[Record] = []
    b: list[Record] = []
    rows: list[Record] = []
    for index, pick in enumerate(rng.integers(0, len(data.items), size=n)):
        item = data.items[int(pick)]
        first, second = data.base[item], data.cand[item]
        if swap and rng.random() < 0.5:
            first, second = second, first
        a += relabel(first, index)
        b += relabel(second, index)
        rows += relabel(data.rows.get(item, []), index)
    return a, b, rows


def fixed_verdict(a: Sequence[Record], b: Sequence[Record], rows: Sequence[Record],
                  policy: Policy, n_boot: int) -> str:
    comparison = compare_samples(a, b, n_boot=n_boot, confidence=policy.speed.confidence)
    if rows:
        comparison = comparison.model_copy(update={"agreement": summarize_agreement(
            rows, confidence=policy.speed.confidence)})
    return decide(comparison, policy).decision


def prefix(records: Sequence[Record], n: int) -> list[Record]:
    keep = {f"d{i:05d}" for i in range(n)}
    return [r for r in records if r["item_id"] in keep]


def trial(data: Recorded, policy: Policy, args: argparse.Namespace,
          rng: np.random.Generator, swap: bool) -> dict[str, Any]:
    a, b, rows = draw(data, args.max_items, rng, swap)
    order = [f"d{i:05d}" for i in range(args.max_items)]
    seq = sequential_section(a, b, order, policy, max_items=args.max_items,
                             agreement=rows or None)
    speed = next(g for g in seq.gates if g.name == "speed")
    n = args.fixed_n
    fixed = fixed_verdict(prefix(a, n), prefix(b, n), prefix(rows, n), policy, args.n_boot)
    peek, peek_at = "INCONCLUSIVE", n
    for look in range(args.peek_from, n + 1, args.peek_every):
        peek = fixed_verdict(prefix(a, look), prefix(b, look), prefix(rows, look), policy,
                             args.n_boot)
        if peek != "INCONCLUSIVE":
            peek_at = look
            break
    return {"seq": seq.decision, "seq_n": seq.n_items, "seq_speed": speed.outcome,
            "seq_by": ",".join(seq.decided_by),
            "fixed": fixed, "peek": peek, "peek_n": peek_at}


def rate(count: int, trials: int) -> str:
    low, high = stats.binomtest(count, trials).proportion_ci(0.95, method="exact")
    return f"{count / trials:.1%} ({low:.1%}-{high:.1%})"


def summarize(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    n = len(results)
    out: dict[str, Any] = {"trials": n}
    for how in ("seq", "fixed", "peek"):
        counts = Counter(r[how] for r in results)
        out[how] = {d: counts.get(d, 0) for d in ("ACCEPT", "REJECT", "INCONCLUSIVE")}
    out["seq_mean_items"] = float(np.mean([r["seq_n"] for r in results]))
    out["seq_within_10"] = sum(1 for r in results if r["seq"] != "INCONCLUSIVE"
                               and r["seq_n"] <= 10)
    out["seq_speed_decided"] = sum(1 for r in results if r["seq_speed"] != "inconclusive")
    out["peek_mean_items"] = float(np.mean([r["peek_n"] for r in results]))
    out["seq_decided_by"] = dict(Counter(f"{r['seq']}: {r['seq_by']}" for r in results
                                         if r["seq"] != "INCONCLUSIVE"))
    return out


def zero_margin(policy: Policy) -> Policy:
    """Speed margins 0 and min_items 2: the bare decision intervals."""
    speed = dataclasses.replace(policy.speed, min_speedup=0.0, max_slowdown=0.0)
    return dataclasses.replace(policy, name="zero-margin", min_items=2, speed=speed)


def print_table(report: Mapping[str, Any]) -> None:
    print("| arm | policy | sequential: ACCEPT / REJECT / INCONCLUSIVE | mean items "
          "| decided within 10 | fixed-N: A / R / I | peeking: A / R / I | peeking mean items |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in report["rows"]:
        s, t = row["summary"], row["summary"]["trials"]
        fmt = "{ACCEPT} / {REJECT} / {INCONCLUSIVE}"
        print(f"| {row['label']} | {row['policy']} | {fmt.format(**s['seq'])} | "
              f"{s['seq_mean_items']:.1f} | {rate(s['seq_within_10'], t)} | "
              f"{fmt.format(**s['fixed'])} | {fmt.format(**s['peek'])} | "
              f"{s['peek_mean_items']:.1f} |")
    print()
    for row in report["rows"]:
        print(f"{row['arm']} ({row['policy']}): sequential decided by "
              f"{row['summary']['seq_decided_by']}")
    for row in report["rows"]:
        if row["arm"] == "same":
            s, t = row["summary"], row["summary"]["trials"]
            false_seq = s["seq"]["ACCEPT"] + s["seq"]["REJECT"]
            false_peek = s["peek"]["ACCEPT"] + s["peek"]["REJECT"]
            false_fixed = s["fixed"]["ACCEPT"] + s["fixed"]["REJECT"]
            print(f"A/A, {row['policy']}: false decisions sequential {rate(false_seq, t)}, "
                  f"speed gate decided {rate(s['seq_speed_decided'], t)}; fixed-N once "
                  f"{rate(false_fixed, t)}; peeking {rate(false_peek, t)}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ab", type=Path, help="a recorded fixed-N A/B directory")
    p.add_argument("--baseline", default="base")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--max-items", type=int, default=300)
    p.add_argument("--fixed-n", type=int, default=40)
    p.add_argument("--peek-from", type=int, default=10)
    p.add_argument("--peek-every", type=int, default=5)
    p.add_argument("--n-boot", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--zero-margin", action="store_true",
                   help="also judge the A/A arm with speed margins 0 and min_items 2")
    p.add_argument("--policy", help="a policy file over the default (e.g. one that only "
                   "judges quality: [speed] max_slowdown = 0.9)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    policies = [load_policy(args.policy)]
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()},
                              "rows": []}
    t0 = time.perf_counter()
    for arm in args.arms.split(","):
        data = load(args.ab, args.baseline, arm)
        for policy in policies + ([zero_margin(policies[0])] if args.zero_margin
                                  and arm == "same" else []):
            rng = np.random.default_rng(args.seed)
            results = [trial(data, policy, args, rng, swap=arm in SWAPPED)
                       for _ in range(args.trials)]
            label, expected = ARMS.get(arm, (arm, "?"))
            report["rows"].append({"arm": arm, "label": label, "expected": expected,
                                   "policy": policy.name, "n_recorded_items": len(data.items),
                                   "summary": summarize(results)})
            print(f"{arm} ({policy.name}): {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr)
    report["seconds"] = time.perf_counter() - t0
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
