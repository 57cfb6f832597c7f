"""Bench and baseline workflows on the fake engine (the fast tier): fixed-length cases,
the bench record, and a baseline that holds on the same build and catches a changed
output or a slower decode."""

from __future__ import annotations

import json
from pathlib import Path

from abgate.records.documents import BaselineRecord
from abgate.runner.documents import read_record
from tests.support.fake import cli

BENCH = ("--engine", "fake", "--input-len", "64,128", "--output-len", "16", "--repeats", "3",
         "--warmup", "1")


def test_bench_runs_every_case_and_records_it(tmp_path: Path, small_bandwidth_probe: None
                                              ) -> None:
    r = cli("bench", *BENCH, "-o", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    doc = read_record(tmp_path / "b" / "run.json", "bench")
    assert doc.status == "complete" and doc.engine is not None and doc.engine.name == "fake"
    samples = [json.loads(x) for x in (tmp_path / "b" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * (1 + 3)
    measured = [s for s in samples if not s.get("warmup")]
    # ignore_eos: every measured request decodes exactly --output-len tokens
    assert {s["output"]["tokens"] for s in measured} == {16}, measured[0]["output"]
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["peak_bandwidth"]["source"] == "probe estimate"  # no --peak-bw given
    assert summary["peak_bandwidth"]["gbps"] > 0


def test_bench_refuses_a_case_past_the_context(tmp_path: Path) -> None:
    r = cli("bench", "--engine", "fake", "--engine-arg", "n_ctx=100", "--input-len", "128",
            "--output-len", "16", "-o", str(tmp_path / "b"))
    assert r.returncode == 2 and "n_ctx" in r.stderr, r.stderr


def test_baseline_holds_on_the_same_build_and_catches_changes(tmp_path: Path) -> None:
    base = tmp_path / "bl"
    rec = cli("baseline", "record", "--engine", "fake", "--input-len", "64", "--output-len",
              "16", "--no-probes", "-o", str(base))
    assert rec.returncode == 0, rec.stderr
    assert read_record(base / "baseline.json", "baseline", model=BaselineRecord).cases[0].top_k
    same = cli("baseline", "check", str(base))
    assert same.returncode == 0, same.stdout + same.stderr
    changed = cli("baseline", "check", str(base), "--engine-arg", "perturb=4.0")
    assert changed.returncode == 1, changed.stdout
    slower = cli("baseline", "check", str(base), "--engine-arg", "tpot_ms=8.0")
    assert slower.returncode == 1 and "slower" in slower.stdout, slower.stdout
