"""Baselines: record reference outputs, reproduce them, detect a divergence.

The reference is recorded here, in this test session, and checked on the same host at the
same thread count: a baseline recorded on another CPU or thread count may differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.integrity import record_text, seal
from tests.conftest import abgate, engine_threads, thread_flags

pytestmark = pytest.mark.engine

RECORD = ["baseline", "record", "--input-len", "32,64", "--output-len", "24", "--repeats", "2",
          "--warmup", "1", "--probe-len", "128", "--engine-arg", "n_ctx=512", *thread_flags()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "B"
    r = abgate(*RECORD, "-o", str(out))
    assert r.returncode == 0, r.stderr
    # progress on a non-terminal stderr: 2 cases x (1 warm-up + 2 repeats), then 3 probes
    assert "abgate: baseline record B: 9/9 (100%), " in r.stderr, r.stderr
    return out


def test_record_holds_references(recorded: Path) -> None:
    doc = json.loads((recorded / "baseline.json").read_text())
    assert doc["kind"] == "baseline" and len(doc["cases"]) == 2
    for case in doc["cases"]:
        assert len(case["output_token_ids"]) == 24 and len(case["output_sha256"]) == 64
        assert len(case["prompt_sha256"]) == 64 and len(case["top_k"]) == 24
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


def test_check_reproduces(recorded: Path, tmp_path: Path) -> None:
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


def test_undeclared_env_drift_fails_and_an_allowed_one_passes(recorded: Path,
                                                               tmp_path: Path) -> None:
    report = tmp_path / "check.json"
    drifted = {"GGML_ABGATE_TEST_DRIFT": "1"}  # a variable of a recorded class (GGML_*)
    r = abgate("baseline", "check", str(recorded), "--tolerance", "1", "--json", str(report),
               env=drifted)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    assert all(c["tokens_match"] for c in doc["cases"])  # it fails on the drift alone
    assert doc["configuration"]["unexplained"] == ["env.GGML_ABGATE_TEST_DRIFT"]
    assert "differs beyond --allow-diff: env.GGML_ABGATE_TEST_DRIFT" in r.stdout
    r = abgate("baseline", "check", str(recorded), "--tolerance", "1", "--json", str(report),
               "--allow-diff", "host.*,env.GGML_ABGATE_*", env=drifted)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(report.read_text())["configuration"]
    assert doc["passed"] and doc["allow"] == ["host.*", "env.GGML_ABGATE_*"]
    assert doc["summary"] == "exact match except env.GGML_ABGATE_TEST_DRIFT (allowed)"


def test_changed_engine_arg_diverges_with_position(recorded: Path, tmp_path: Path) -> None:
    report = tmp_path / "check.json"
    r = abgate("baseline", "check", str(recorded), "--engine-arg", "rope_freq_base=1.0",
               "--tolerance", "1", "--json", str(report))
    assert r.returncode == 1
    doc = json.loads(report.read_text())
    assert not doc["passed"]
    div = [c["divergence"] for c in doc["cases"] if not c["tokens_match"]]
    assert div and all(isinstance(d["position"], int) and d["position"] < 24 for d in div)
    assert all(d["reference_token"] != d["current_token"] for d in div)
    assert all("reference_in_current_top_k" in d for d in div)
    # the warm-up runs first, so it is the first divergence named; every request counted
    assert all(d["request"] == "warm-up 1" for d in div)
    bad = [c["repeats"] for c in doc["cases"] if not c["tokens_match"]]
    assert all(a["warmup_match"] == 0 and a["measured"] == 2 for a in bad)
    assert "DIFFER" in r.stdout and "warm-up 1" in r.stdout
    assert "engine_args.rope_freq_base" in doc["configuration"]["unexplained"]


@pytest.mark.parametrize("old_format", [False, True])
def test_speed_regression_fails_the_check(recorded: Path, tmp_path: Path,
                                          old_format: bool) -> None:
    doc = json.loads((recorded / "baseline.json").read_text())
    for case in doc["cases"]:  # a baseline recorded on a build 100x faster
        case["speed"]["steady_decode_tps"]["median"] *= 100
        values = case.pop("decode_tps_values")
        assert len(values) == 2 and min(values) > 0  # one value per measured repeat
        if not old_format:  # (a baseline from before per-repeat values: its median only)
            case["decode_tps_values"] = [v * 100 for v in values]
    assert doc["host_load"]["before"]["cpus"] >= 1
    fake = tmp_path / "B"
    fake.mkdir()
    (fake / "baseline.json").write_text(record_text(seal(doc)))  # sealed as recorded
    report = tmp_path / "check.json"
    # two repeats: on a loaded host their t-interval (one degree of freedom) may span
    # 0 to hundreds; the slowdown is gross, so it is SLOWER whatever the interval
    r = abgate("baseline", "check", str(fake), "--repeats", "2", "--json", str(report))
    assert r.returncode == 1 and "SLOWER" in r.stdout, r.stdout + r.stderr
    out = json.loads(report.read_text())
    rows = out["cases"]
    assert all(c["tokens_match"] and not c["speed"]["ok"] for c in rows)
    assert all(c["speed"]["outcome"] == "slower" and len(c["speed"]["current_values"]) == 2
               and "every current repeat" in c["speed"]["reason"] for c in rows)
    assert out["host_load"]["current"]["after"]["cpus"] >= 1 and not out["speed_inconclusive"]
