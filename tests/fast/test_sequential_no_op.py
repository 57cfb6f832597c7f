"""Cheap no-op pull requests (issue 34 item 5): with sequential stopping, a change that
changes nothing measurable is ACCEPTED in a fraction of the fixed N, under the
anytime-valid gates whose A/A error is calibrated in docs/statistics.md (0.7% at up to
300 items, benchmarks/sequential_calibration.py). Decisions only, never figures."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fake import cli

N = 500  # the synthetic suite's size: the fixed-N design runs every item

EXPERIMENT = f"""
name = "no-op"
baseline = "base"
policy = "no-slower"
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "easy"
limit = {N}
max_tokens = 16
[schedule]
mode = "interleave"
warmup = 0
stopping = "sequential"
look_every = 10
[evidence]
agreement = false
probes = false
[arms.base]
[arms.no-op]
changes = ["ignored"]
engine_args = {{ ignored = {{ comment = "a refactor" }} }}
"""


def test_a_no_op_is_accepted_in_a_fraction_of_the_fixed_n(tmp_path: Path) -> None:
    exp = tmp_path / "no-op.toml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "seq"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "comparison.json").read_text())["comparisons"]["no-op"]
    seq = doc["comparison"]["sequential"]
    assert doc["verdict"]["decision"] == "ACCEPT"
    assert seq["stopped_early"] and seq["stopped_at"] <= 0.6 * N, seq["stopped_at"]
    samples = (out / "arms" / "no-op" / "samples.jsonl").read_text().splitlines()
    assert len(samples) < 0.6 * N + 10  # the items after the stop were never run
    assert "0.025 per side at any stopping time" in seq["guarantee"]
