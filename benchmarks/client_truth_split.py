"""Where a client's lag lies, from one ``client_truth.py`` work directory (``OUT=DIR``):
for each abgate run in it, the clock start to the server's first request read, the
server's last token written to the client's end (together: what throughput loses), and
per request the send stamp to the server's read (what TTFT adds before the server's
clock), the first token written to the client's stamp, the last written to the client's
end (median and max, ms).

    python benchmarks/client_truth_split.py DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _split(work: Path, side: str) -> None:
    rec = json.loads((work / side / "load.json").read_text())
    t0, dur = rec["t0_perf_counter"], rec["metrics"]["duration_s"]
    srv = json.loads((work / f"server-{side}.json").read_text())
    prompts = [json.loads(x)["prompt"] for x in (work / "prompts.jsonl").read_text().splitlines()]
    lines = sorted((json.loads(x) for x in (work / side / "load_samples.jsonl").read_text()
                    .splitlines()), key=lambda x: x["index"])
    came = [srv["arrived"][p][0] for p in prompts]
    sent = [srv["sent"][p] for p in prompts]
    first_in, last_out = min(came), max(s[-1] for s in sent)

    def q(v: list[float]) -> str:
        return f"{statistics.median(v):.2f} / {max(v):.2f}"

    print(f"{side}: duration {dur:.4f} s, the server's span {last_out - first_in:.4f} s")
    print(f"  clock start -> first read {(first_in - t0) * 1e3:.2f} ms; last written -> "
          f"client end {(t0 + dur - last_out) * 1e3:.2f} ms")
    print("  per request (median / max ms): send -> read",
          q([(c - (t0 + x["t_send_s"])) * 1e3 for c, x in zip(came, lines, strict=True)]),
          "; first written -> stamped",
          q([(t0 + x["t_chunks_s"][0] - s[0]) * 1e3 for s, x in zip(sent, lines, strict=True)]),
          "; last written -> end",
          q([(t0 + x["t_end_s"] - s[-1]) * 1e3 for s, x in zip(sent, lines, strict=True)]))


def main() -> None:
    work = Path(sys.argv[1])
    for d in sorted(p.name for p in work.iterdir() if (p / "load.json").is_file()):
        _split(work, d)


if __name__ == "__main__":
    main()
