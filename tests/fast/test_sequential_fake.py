"""A sequential A/B on the fake engine (moved from the engine tier's test_sequential_ab):
it stops as soon as the broken arm's verdict is certain, says so in comparison.json, ab.json
and the report, and an A/B stopped mid-way resumes to the same stop with one look per item.
Decisions only, never figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from abgate.engines.base import GenerationResult
from abgate.engines.fake import FakeCall
from tests.conftest import read_lines
from tests.support.fake import cli, use_handler

N = 40
EXPERIMENT = f"""
name = "sequential-broken"
baseline = "base"
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "easy"
limit = {N}
max_tokens = 24
[schedule]
mode = "interleave"
warmup = 0
stopping = "sequential"
[evidence]
probes = false
agreement_tokens = 16
[arms.base]
[arms.broken]
engine_args = {{ perturb = 4.0 }}
"""


def _measured(path: Path) -> list[dict[str, Any]]:
    return [s for s in read_lines(path) if not s["warmup"]]


def _check_stopped_early(ab: Path) -> dict[str, Any]:
    comp = json.loads((ab / "comparison.json").read_text())
    seq = comp["comparisons"]["broken"]["comparison"]["sequential"]
    assert comp["decision"] == "REJECT"
    assert seq["stopped_early"] and seq["stopped_at"] < N and seq["max_items"] == N
    assert set(seq["decided_by"]) & {"mean_kld", "top1_agreement"}
    for arm in ("base", "broken"):  # generation stopped at the look that decided
        samples = _measured(ab / "arms" / arm / "samples.jsonl")
        assert len(samples) == seq["stopped_at"]
        assert len({s["key"] for s in samples}) == len(samples)
    record = json.loads((ab / "ab.json").read_text())
    assert record["status"] == "complete"
    assert record["sequential"]["stopped_at"] == seq["stopped_at"]
    assert record["sequential"]["looks"][-1]["decisions"] == {"broken": "REJECT"}
    notes = comp["comparisons"]["broken"]["verdict"]["notes"]
    assert any(f"stopped early after {seq['stopped_at']} of at most {N}" in n for n in notes)
    report = (ab / "report.md").read_text()
    assert f"stopped early after {seq['stopped_at']} of at most {N} items" in report
    assert "fails when the lower bound is above" in report and "<redacted>" not in report
    return seq  # type: ignore[no-any-return]


def test_sequential_ab_stops_early_on_broken_arm(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    r = cli("ab", str(tmp_path / "exp.toml"), "-o", str(tmp_path / "AB"))
    assert r.returncode == 1, r.stdout + r.stderr
    _check_stopped_early(tmp_path / "AB")
    assert "stopped early after" in r.stdout


def test_stopped_sequential_ab_resumes_to_the_same_stop(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    whole = tmp_path / "WHOLE"
    assert cli("ab", str(tmp_path / "exp.toml"), "-o", str(whole)).returncode == 1
    stop = _check_stopped_early(whole)["stopped_at"]
    assert stop >= 3  # else there is no mid-way to stop at
    calls: list[int] = []

    def ctrl_c_at_the_third_item(call: FakeCall) -> GenerationResult | None:
        calls.append(1)
        if len(calls) > 4:  # two items of each arm, interleaved
            raise KeyboardInterrupt("stopped mid-way")
        return None

    ab = tmp_path / "AB"
    with use_handler(ctrl_c_at_the_third_item):
        r = cli("ab", str(tmp_path / "exp.toml"), "-o", str(ab))
    assert r.returncode != 0 and json.loads((ab / "ab.json").read_text())["status"] != "complete"
    r = cli("ab", "--resume", str(ab))
    assert r.returncode == 1, r.stdout + r.stderr
    seq = _check_stopped_early(ab)
    assert seq["stopped_at"] == stop  # the same stop as the run never stopped
    looks = json.loads((ab / "ab.json").read_text())["sequential"]["looks"]
    assert [lk["n_items"] for lk in looks] == list(range(1, stop + 1))
