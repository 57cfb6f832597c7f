"""Throughput of abgate's answer extractor on 100,000 realistic outputs.

The outputs are built deterministically from the 1,319 GSM8K test solutions, in
the shapes models actually produce: the raw solution (``####``), a boxed LaTeX
finish, markdown and plain answer phrases, a bare last number, step headings
with display math, and a share of invalid endings (non-integral, no number).

Run from the repository root::

    PYTHONPATH=src python benchmarks/bench_extract.py [--n 100000] [--repeats 7]

It prints the median and min-max over repeats of microseconds per output.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from abgate.scoring.extract import extract_integer

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/gsm8k/test.jsonl"
_CALC = re.compile(r"<<[^>]*>>")


def _boxed(body: str, value: str, rnd: random.Random) -> str:
    return f"{body}\n\nTherefore, the final answer is $\\boxed{{{value}}}$."


def _markdown(body: str, value: str, rnd: random.Random) -> str:
    return f"Let's solve this step by step.\n\n{body}\n\n**Final Answer:** **{value}**"


def _phrase(body: str, value: str, rnd: random.Random) -> str:
    return f"{body}\nThe answer is {value}."


def _last_number(body: str, value: str, rnd: random.Random) -> str:
    return f"{body}\nSo in total that comes to {value}."


def _headings(body: str, value: str, rnd: random.Random) -> str:
    steps = [line for line in body.splitlines() if line.strip()]
    shown = "\n\n".join(f"#### Step {i}\n\\[ {s} \\]" for i, s in enumerate(steps, start=1))
    return f"{shown}\n\n#### Final Answer\nThe answer is ${value}$"


def _invalid(body: str, value: str, rnd: random.Random) -> str:
    if rnd.random() < 0.5:
        return f"{body}\nThe answer is {value}.5 approximately."
    return f"{body}\nThe answer is not clear from the problem."


# (builder, share of outputs, keep the <<a*b=c>> calculator annotations?)
VARIANTS: list[tuple[Callable[[str, str, random.Random], str], float, bool]] = [
    (lambda body, value, rnd: f"{body}#### {value}", 0.15, True),
    (_boxed, 0.25, False),
    (_markdown, 0.15, False),
    (_phrase, 0.15, True),
    (_last_number, 0.10, False),
    (_headings, 0.10, False),
    (_invalid, 0.10, False),
]


def build_outputs(data: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` outputs, the same ones for the same ``data``, ``n`` and ``seed``."""
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    rnd = random.Random(seed)
    builders = [b for b, _, _ in VARIANTS]
    weights = [w for _, w, _ in VARIANTS]
    keep = {id(b): k for b, _, k in VARIANTS}
    outputs = []
    for i in range(n):
        body, value = rows[i % len(rows)]["answer"].rsplit("####", 1)
        builder = rnd.choices(builders, weights)[0]
        if not keep[id(builder)]:
            body = _CALC.sub("", body)
        outputs.append(builder(body.rstrip() + "\n", value.strip(), rnd))
    return outputs


def measure(outputs: list[str], repeats: int) -> list[float]:
    """Microseconds per output, once per repeat."""
    extract = extract_integer
    for text in outputs[:2000]:  # warm-up
        extract(text)
    per_output = []
    for _ in range(repeats):
        start = time.perf_counter()
        for text in outputs:
            extract(text)
        per_output.append((time.perf_counter() - start) / len(outputs) * 1e6)
    return per_output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="GSM8K test.jsonl")
    parser.add_argument("--n", type=int, default=100_000, help="number of outputs")
    parser.add_argument("--repeats", type=int, default=7, help="timed passes over all outputs")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"bench_extract: GSM8K data not found at {args.data}", file=sys.stderr)
        return 2
    outputs = build_outputs(args.data, args.n)
    decided = (extract_integer(text) for text in outputs[:5000])
    sources = Counter(e.source if e.valid else f"{e.source}/{e.reason}" for e in decided)
    times = measure(outputs, args.repeats)
    mean_chars = statistics.fmean(len(t) for t in outputs)
    print(f"outputs: {len(outputs):,} (mean {mean_chars:.0f} chars); repeats: {args.repeats}")
    shares = ", ".join(f"{k} {v}" for k, v in sources.most_common())
    print(f"rules deciding (first 5,000): {shares}")
    print(
        f"extract_integer: median {statistics.median(times):.1f} us/output "
        f"(min {min(times):.1f}, max {max(times):.1f}); "
        f"{statistics.median(times) * len(outputs) / 1e6:.2f} s per {len(outputs):,}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
