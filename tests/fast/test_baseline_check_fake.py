"""``abgate baseline check`` decisions on the fake engine (were engine-tier tests on
llama.cpp in tests/test_baseline.py; the reference they check is the same kind of
record, and what is under test is the check's logic): an undeclared env drift fails
and an allowed one passes, a changed engine arg diverges at a named position, and a
baseline recorded on a build 100x faster fails as SLOWER (with and without the
per-repeat values of newer records). The record edit goes through
``tests.support.records.edit_sealed`` (the typed record, sealed again)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from abgate.records.documents import BaselineRecord
from tests.support.fake import cli, fake_loads
from tests.support.records import changed, edit_sealed

OUTPUT_LEN = 12
RECORD = ("baseline", "record", "--engine", "fake", "--input-len", "16,32", "--output-len",
          str(OUTPUT_LEN), "--repeats", "2", "--warmup", "1", "--no-probes")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "B"
    r = cli(*RECORD, "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_undeclared_env_drift_fails_and_an_allowed_one_passes(recorded: Path,
                                                               tmp_path: Path) -> None:
    report = tmp_path / "check.json"
    drifted = {"GGML_ABGATE_TEST_DRIFT": "1"}  # a variable of a recorded class (GGML_*)
    r = cli("baseline", "check", str(recorded), "--tolerance", "1", "--json", str(report),
            env=drifted)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    assert all(c["tokens_match"] for c in doc["cases"])  # it fails on the drift alone
    assert doc["configuration"]["unexplained"] == ["env.GGML_ABGATE_TEST_DRIFT"]
    assert "differs beyond --allow-diff: env.GGML_ABGATE_TEST_DRIFT" in r.stdout
    r = cli("baseline", "check", str(recorded), "--tolerance", "1", "--json", str(report),
            "--allow-diff", "host.*,env.GGML_ABGATE_*", env=drifted)
    assert r.returncode == 0, r.stdout + r.stderr
    conf = json.loads(report.read_text())["configuration"]
    assert conf["passed"] and conf["allow"] == ["host.*", "env.GGML_ABGATE_*"]
    assert conf["summary"] == "exact match except env.GGML_ABGATE_TEST_DRIFT (allowed)"


def test_changed_engine_arg_diverges_with_position(recorded: Path, tmp_path: Path) -> None:
    """A numeric change past the fake's logit margin (perturb) changes greedy tokens, as
    rope_freq_base=1.0 does on llama.cpp: the check names where each case diverges."""
    report = tmp_path / "check.json"
    r = cli("baseline", "check", str(recorded), "--engine-arg", "perturb=4.0",
            "--tolerance", "1", "--json", str(report))
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    assert not doc["passed"]
    div = [c["divergence"] for c in doc["cases"] if not c["tokens_match"]]
    assert div and all(isinstance(d["position"], int) and d["position"] < OUTPUT_LEN
                       for d in div)
    assert all(d["reference_token"] != d["current_token"] for d in div)
    assert all("reference_in_current_top_k" in d for d in div)
    # the warm-up runs first, so it is the first divergence named; every request counted
    assert all(d["request"] == "warm-up 1" for d in div)
    bad = [c["repeats"] for c in doc["cases"] if not c["tokens_match"]]
    assert all(a["warmup_match"] == 0 and a["measured"] == 2 for a in bad)
    assert "DIFFER" in r.stdout and "warm-up 1" in r.stdout
    assert "engine_args.perturb" in doc["configuration"]["unexplained"]


def _faster(doc: BaselineRecord, old_format: bool) -> BaselineRecord:
    """``doc`` as if recorded on a build 100x faster; ``old_format``: a case of a
    baseline from before per-repeat values (its median only)."""
    cases = []
    for case in doc.cases:
        values = case.decode_tps_values
        assert values is not None and len(values) == 2 and min(v or 0 for v in values) > 0
        decode = changed(case.speed.steady_decode_tps,
                         median=(case.speed.steady_decode_tps.median or 0) * 100)
        new = changed(case, speed=changed(case.speed, steady_decode_tps=decode),
                      decode_tps_values=[(v or 0) * 100 for v in values])
        if old_format:
            new = type(case).model_validate(
                {k: v for k, v in new.to_dict().items() if k != "decode_tps_values"})
        cases.append(new)
    return doc.model_copy(update={"cases": cases})


@pytest.mark.parametrize("old_format", [False, True])
def test_speed_regression_fails_the_check(recorded: Path, tmp_path: Path,
                                          old_format: bool) -> None:
    fast = tmp_path / "B"
    shutil.copytree(recorded, fast)
    edited = edit_sealed(fast / "baseline.json", lambda d: _faster(d, old_format))
    assert isinstance(edited, BaselineRecord)
    assert all((c.decode_tps_values is None) == old_format for c in edited.cases)
    report = tmp_path / "check.json"
    with fake_loads() as loads:
        r = cli("baseline", "check", str(fast), "--repeats", "2", "--json", str(report))
    assert r.returncode == 1 and "SLOWER" in r.stdout, r.stdout + r.stderr
    assert loads  # the seal held: the check re-ran the engine
    out = json.loads(report.read_text())
    rows = out["cases"]
    assert all(c["tokens_match"] and not c["speed"]["ok"] for c in rows)
    assert all(c["speed"]["outcome"] == "slower" and len(c["speed"]["current_values"]) == 2
               and "every current repeat" in c["speed"]["reason"] for c in rows)
    assert out["host_load"]["current"]["after"]["cpus"] >= 1 and not out["speed_inconclusive"]
