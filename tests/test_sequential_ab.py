"""A sequential A/B on the embedded engine: it stops as soon as the broken arm's verdict
is certain, says so in comparison.json and the report, and a killed sequential A/B
resumes to the same stop. Decisions only, never this CPU's figures."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import abgate, read_lines, toml_engine_args, wait_until

N = 20
EXPERIMENT = f"""
name = "sequential-rope"
baseline = "base"
[shared]
suite = "synthetic"
difficulty = "trivial"
limit = {N}
max_tokens = 16
engine_args = {toml_engine_args({"n_ctx": 512})}
[schedule]
mode = "interleave"
warmup = 0
stopping = "sequential"
[evidence]
probes = false
agreement_tokens = 16
[arms.base]
[arms.rope]
engine_args = {{ rope_freq_base = 1.0 }}
"""


def _measured(path: Path) -> list[dict[str, Any]]:
    return [s for s in read_lines(path) if not s["warmup"]]


def _check_stopped_early(ab: Path) -> dict[str, Any]:
    comp = json.loads((ab / "comparison.json").read_text())
    seq = comp["comparisons"]["rope"]["comparison"]["sequential"]
    assert comp["decision"] == "REJECT"
    assert seq["stopped_early"] and seq["stopped_at"] <= 10 and seq["max_items"] == N
    assert set(seq["decided_by"]) & {"mean_kld", "top1_agreement"}
    for arm in ("base", "rope"):  # generation stopped at the look that decided
        samples = _measured(ab / "arms" / arm / "samples.jsonl")
        assert len(samples) == seq["stopped_at"]
        assert len({s["key"] for s in samples}) == len(samples)
    record = json.loads((ab / "ab.json").read_text())
    assert record["status"] == "complete"
    assert record["sequential"]["stopped_at"] == seq["stopped_at"]
    assert record["sequential"]["looks"][-1]["decisions"] == {"rope": "REJECT"}
    notes = comp["comparisons"]["rope"]["verdict"]["notes"]
    assert any(f"stopped early after {seq['stopped_at']} of at most {N}" in n for n in notes)
    report = (ab / "report.md").read_text()
    assert f"stopped early after {seq['stopped_at']} of at most {N} items" in report
    assert "fails when the lower bound is above" in report and "<redacted>" not in report
    return seq  # type: ignore[no-any-return]


@pytest.mark.engine
def test_sequential_ab_stops_early_on_broken_arm(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    r = abgate("ab", str(tmp_path / "exp.toml"), "-o", str(tmp_path / "AB"))
    assert r.returncode == 1, r.stdout + r.stderr
    _check_stopped_early(tmp_path / "AB")
    assert "stopped early after" in r.stdout


@pytest.mark.engine
def test_killed_sequential_ab_resumes_to_the_same_stop(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    ab = tmp_path / "AB"
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "ab", str(tmp_path / "exp.toml"),
                             "-o", str(ab)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def first_look() -> bool:
        try:
            return bool(json.loads((ab / "ab.json").read_text())["sequential"]["looks"])
        except (OSError, ValueError, KeyError, TypeError):
            return False

    try:
        wait_until(first_look, proc, "the first look")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    r = abgate("ab", "--resume", str(ab))
    assert r.returncode == 1, r.stdout + r.stderr
    seq = _check_stopped_early(ab)
    looks = json.loads((ab / "ab.json").read_text())["sequential"]["looks"]
    assert [lk["n_items"] for lk in looks] == list(range(1, seq["stopped_at"] + 1))
