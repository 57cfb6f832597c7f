"""Baselines on llama.cpp: record reference outputs and reproduce them (a divergence, a
drift and a slower build: tests/fast/test_baseline_check_fake.py).

The reference is recorded here, in this test session, and checked on the same host at the
same thread count: a baseline recorded on another CPU or thread count may differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import abgate, engine_threads, thread_flags

pytestmark = pytest.mark.engine

RECORD = ["baseline", "record", "--input-len", "32,64", "--output-len", "12", "--repeats", "2",
          "--warmup", "1", "--probe-len", "128", "--engine-arg", "n_ctx=512", *thread_flags()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "B"
    r = abgate(*RECORD, "-o", str(out))
    assert r.returncode == 0, r.stderr
    # progress on a non-terminal stderr: 2 cases x (1 warm-up + 2 repeats), then 3 probes
    assert "abgate: baseline record B: 9/9 (100%), " in r.stderr, r.stderr
    return out


def test_record_holds_references_and_the_check_reproduces(recorded: Path,
                                                          tmp_path: Path) -> None:
    """One real record, checked again in another process on the same host and thread
    count. (What a check decides on a drift, a changed arg or a slower build:
    tests/fast/test_baseline_check_fake.py, on the fake engine.)"""
    doc = json.loads((recorded / "baseline.json").read_text())
    assert doc["kind"] == "baseline" and len(doc["cases"]) == 2
    for case in doc["cases"]:
        assert len(case["output_token_ids"]) == 12 and len(case["output_sha256"]) == 64
        assert len(case["prompt_sha256"]) == 64 and len(case["top_k"]) == 12
        assert all(len(t) == 5 for t in case["top_k"])
        # greedy: the chosen token is the engine's top-1
        assert [t[0] for t in case["top_k"]] == case["output_token_ids"]
        assert case["speed"]["steady_decode_tps"]["median"] > 0
        # the record's own warm-up and repeats reproduce its reference
        assert case["repeat_agreement"]["summary"] == "2/2 repeats and the warm-up match"
        assert [r["request"] for r in case["requests"]] == ["warm-up 1", "repeat 1", "repeat 2"]
    assert doc["status"] == "complete" and doc["integrity"]["digest"].startswith("sha256:")
    assert {p["name"] for p in doc["probes"]} >= {"arithmetic", "copy"}
    assert doc["provenance"]["libraries"] and doc["engine"]["effective"]["n_ctx"] == 512
    for key, value in engine_threads().items():  # the check re-runs at the recorded count
        assert doc["engine"]["effective"][key] == value
    report = tmp_path / "check.json"
    r = abgate("baseline", "check", str(recorded), "--tolerance", "1", "--json", str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    assert doc["passed"] and all(c["tokens_match"] for c in doc["cases"])
    for case in doc["cases"]:  # every current request is compared, warm-up included
        assert case["repeats"]["summary"] == "2/2 repeats and the warm-up match"
        assert case["repeats"]["measured_match"] == 2 and case["repeats"]["warmup_match"] == 1
    assert "2/2 repeats and the warm-up match" in r.stdout
    # same host, same build, same env: the configuration is an exact match
    assert doc["configuration"]["summary"] == "exact match" and doc["configuration"]["passed"]
    assert "configuration: exact match" in r.stdout
    assert "This does not certify:" in r.stdout and "accuracy: " in r.stdout
    assert any(x.startswith("other hosts or thread counts") for x in doc["not_certified"])
