"""Where each client of a ``served_load_together.py`` repeat spent its time, from its
own stamps (the run's archive, ``served-load.tgz``, unpacked: DIR/abgate-R, DIR/vllm-R).

Per client, over the window both were sending: the gaps between consecutive chunk
stamps of all its streams (a client that idles between the server's engine steps shows
long gaps and bursts of stamps microseconds apart; one whose event loop never idles
stamps evenly, each chunk when the loop gets to it), and its closed loop's turnaround
(median time from a request's last token to the next send). For abgate also the split
of that turnaround: last token -> its stream read to the end, and end -> the next send.

    python benchmarks/served_together_stamps.py DIR [--repeat R] [--slots 32]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def _abgate(d: Path) -> tuple[np.ndarray, list[tuple[float, float, float]]]:
    t0 = json.loads((d / "load.json").read_text())["t0_perf_counter"]
    rows = [json.loads(x) for x in (d / "load_samples.jsonl").read_text().splitlines()]
    stamps = np.concatenate([np.asarray(r["t_chunks_s"]) + t0 for r in rows])
    return np.sort(stamps), [(t0 + r["t_send_s"], t0 + r["t_last_s"], t0 + r["t_end_s"])
                             for r in rows]


def _vllm(d: Path) -> tuple[np.ndarray, list[tuple[float, float, float]]]:
    v = json.loads((d / "vllm.json").read_text())
    stamps, reqs = [], []
    for st, ttft, itls in zip(v["start_times"], v["ttfts"], v["itls"], strict=True):
        times = np.cumsum([st + ttft, *itls])
        stamps.append(times)
        reqs.append((st, float(times[-1]), float(times[-1])))
    return np.sort(np.concatenate(stamps)), reqs


def _turnaround(reqs: list[tuple[float, float, float]], slots: int, end: int) -> float:
    ends = sorted(r[end] for r in reqs)
    sends = sorted(r[0] for r in reqs)[slots:]
    return float(np.median([1e3 * (s - e) for s, e in zip(sends, ends, strict=False)]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dir", type=Path)
    p.add_argument("--repeat", type=int, default=0)
    p.add_argument("--slots", type=int, default=32)
    a = p.parse_args()
    sides = {"abgate": _abgate(a.dir / f"abgate-{a.repeat}"),
             "vllm": _vllm(a.dir / f"vllm-{a.repeat}")}
    lo = max(s[0][0] for s in sides.values()) + 2
    hi = min(s[0][-1] for s in sides.values()) - 2
    for name, (stamps, reqs) in sides.items():
        gaps = 1e3 * np.diff(stamps[(stamps > lo) & (stamps < hi)])
        print(f"{name}: chunk-stamp gaps median {np.median(gaps):.3f} ms, p90 "
              f"{np.percentile(gaps, 90):.3f} ms, {np.mean(gaps < 0.02):.0%} within 20 us; "
              f"turnaround median {_turnaround(reqs, a.slots, 1):.2f} ms", end="")
        if name == "abgate":
            tail = np.median([1e3 * (r[2] - r[1]) for r in reqs])
            print(f" (last token -> stream end {tail:.2f}, end -> next send "
                  f"{_turnaround(reqs, a.slots, 2):.2f})")
        else:
            print()


if __name__ == "__main__":
    main()
