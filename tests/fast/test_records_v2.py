"""Records v2 (docs/records.md): one ``--engine-arg`` lands once per facet (given,
resolved, effective) in ``run.json`` and in each A/B arm's; a v1 record of every kind
(``tests/data/golden/v1-final``: the last v1 writers' records) still reads, resumes and
reports; and every record today's writers make is the golden v2 record
(``tests/data/golden/v1-2``) byte for byte, once the facts of one machine and one moment
(times, host, git, pids, paths, measured seconds) are set aside; a v1 record migrated is
that same record: the only v1 -> v2 change is the documented one."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from abgate.ab.analyze import analyze
from abgate.records.documents import RunRecord, upgraded
from abgate.records.engine import to_v2
from abgate.report import render
from abgate.runner.documents import read_record
from tests.support.fake import cli, fake_run
from tests.support.golden import GOLDEN, write_all

V1 = GOLDEN / "v1-final"
V2 = GOLDEN / "v1-2"
RECORDS = {"run/run.json": "run", "ab/ab.json": "ab", "ab/arms/a/run.json": "ab-arm",
           "ab/arms/b/run.json": "ab-arm", "bench/run.json": "bench",
           "baseline/baseline.json": "baseline"}
# Fields other changes added to today's writers after the last v1 writers (v1-final),
# not the v2 migration's (docs/records.md): set aside when a migrated v1 record is
# compared with a v2 one.
LATER = {"ab/ab.json": [("experiment_resolved", "evidence", "weights"),
                        ("experiment_resolved", "suites")]}
# Facts of one machine and one moment, not of the inputs: set aside before comparing.
MOMENT = {"started_at", "ended_at", "recorded_at", "at", "host", "git", "provenance",
          "engine_processes", "cleanup", "integrity", "host_load", "seconds"}


def _inputs_only(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: "<moment>" if k in MOMENT else _inputs_only(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_inputs_only(v) for v in doc]
    return doc


def _differences(a: Any, b: Any, at: str = "") -> list[str]:
    """Where two records differ, byte for byte in their keys, key order and values, but
    for floats equal to 1e-9 (the fake engine's simulated clock gives the same figures up
    to the last digits' noise)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{at}: keys {list(a)} vs {list(b)}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{at}: {len(a)} vs {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _differences(x, y, f"{at}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-9) else [f"{at}: {a} vs {b}"]
    return [] if (type(a), a) == (type(b), b) else [f"{at}: {a!r} vs {b!r}"]


def _same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The differences of two records, their moment set aside."""
    return _differences(_inputs_only(a), _inputs_only(b))


def _paths_of(doc: Any, key: str, at: str = "") -> list[str]:
    """Every path in ``doc`` whose last part is ``key``."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items()
                for p in ([f"{at}.{k}"] if k == key else []) + _paths_of(v, key, f"{at}.{k}")]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _paths_of(v, key, f"{at}[{i}]")]
    return []


def test_one_engine_arg_lands_once_per_facet(tmp_path: Path) -> None:
    r = fake_run(tmp_path / "r", "--engine-arg", "margin=7.5", limit=1, seeds="0")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    assert doc["schema_version"] == 2
    assert _paths_of(doc, "margin") == [".engine.given.margin", ".engine.resolved.margin",
                                        ".engine.effective.margin"]
    assert doc["engine"]["given"] == {"margin": 7.5} and doc["engine"]["effective"]["margin"]
    assert "engine_args" not in doc["config"] and "engine_args" not in doc["spec"]


def test_each_ab_arm_holds_its_engine_args_once_per_facet() -> None:
    arm = json.loads((V2 / "ab" / "arms" / "b" / "run.json").read_text())
    assert _paths_of(arm, "perturb") == [".engine.given.perturb", ".engine.resolved.perturb",
                                         ".engine.effective.perturb"]
    base = json.loads((V2 / "ab" / "arms" / "a" / "run.json").read_text())
    assert base["engine"]["given"] == {} and base["engine"]["effective"]["perturb"] == 0.0
    # ab.json: the experiment as given (what --resume's digest covers) and the difference
    ab = json.loads((V2 / "ab" / "ab.json").read_text())
    assert _paths_of(ab, "perturb") == [".experiment.arms.b.engine_args.perturb"]
    assert list(ab["differences"]["b"]["request"]["undeclared"]) == ["engine_args.perturb"]
    assert not any("effective_config" in e for e in ab["engines"].values())


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_v1_record_migrated_is_the_v2_record(name: str) -> None:
    """The migration step and the writers shape a record alike: a v1 record of the last
    v1 writers, upgraded, is the v2 golden record written from the same inputs."""
    old = json.loads((V1 / name).read_text())
    assert old["schema_version"] == 1
    new = json.loads((V2 / name).read_text())
    for path in LATER.get(name, []):
        parent = new
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]
    assert _same(upgraded(RECORDS[name], old), new) == []


def test_the_migration_moves_exactly_the_four_copies() -> None:
    old = json.loads((V1 / "run" / "run.json").read_text())
    new = to_v2(old)
    assert old["config"]["engine_args"] == old["spec"]["engine_args"] == {"error_rate": 0.25}
    assert new["engine"]["given"] == {"error_rate": 0.25}
    assert new["engine"]["resolved"] == old["spec"]["resolved_engine_args"]
    assert new["engine"]["effective"] == old["engine"]["effective_config"]
    rest = {k: v for k, v in old.items() if k not in ("config", "spec", "engine")}
    assert {k: v for k, v in new.items() if k not in ("config", "spec", "engine")} == rest


def test_todays_records_are_the_golden_v2_records(tmp_path: Path,
                                                  small_bandwidth_probe: None) -> None:
    write_all(tmp_path / "now")
    for name in RECORDS:
        now = json.loads((tmp_path / "now" / name).read_text())
        assert _same(now, json.loads((V2 / name).read_text())) == [], name


def test_a_v1_run_resumes_into_a_v2_record(tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(V1 / "run", out)
    lines = (out / "samples.jsonl").read_text().splitlines(keepends=True)
    (out / "samples.jsonl").write_text(lines[0])  # two samples left to do
    doc = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**doc, "status": "interrupted"}))
    r = cli("run", "--resume", str(out), "--allow-source-change")
    assert r.returncode == 0, r.stderr
    again = read_record(out / "run.json", "run", model=RunRecord)
    assert again.schema_version == 2 and again.status == "complete"
    assert again.engine.given == {"error_rate": 0.25} and len(again.resumes) == 1
    assert again.spec_digest == doc["spec_digest"]  # the digest covers the v1-shaped spec
    assert len((out / "samples.jsonl").read_text().splitlines()) == len(lines)


def test_a_v1_ab_resumes_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    shutil.copytree(V1 / "ab", out)
    arm = out / "arms" / "b"
    lines = (arm / "samples.jsonl").read_text().splitlines(keepends=True)
    (arm / "samples.jsonl").write_text(lines[0])
    for path in (out / "ab.json", arm / "run.json"):
        doc = json.loads(path.read_text())
        path.write_text(json.dumps({**doc, "status": "interrupted"}))
    r = cli("ab", "--resume", str(out), "--allow-source-change")
    assert r.returncode in (0, 3), r.stderr
    resumed = read_record(arm / "run.json", "ab-arm", model=RunRecord)
    assert resumed.schema_version == 2 and resumed.engine.given == {"perturb": 0.05}
    measured = [json.loads(x) for x in (arm / "samples.jsonl").read_text().splitlines()]
    assert len([s for s in measured if not s.get("warmup")]) == len(
        [x for x in lines if '"warmup": true' not in x])
    recorded = json.loads((V1 / "ab" / "comparison.json").read_text())
    assert analyze(out).decision == recorded["decision"]
    assert "perturb" in render(out, "md")


def test_a_v1_baseline_still_checks(tmp_path: Path) -> None:
    out = tmp_path / "baseline"
    shutil.copytree(V1 / "baseline", out)
    r = cli("baseline", "check", str(out), "--tolerance", "1",
            "--allow-diff", "host.*,library.*,package.*,env.*")
    assert r.returncode == 0, r.stdout + r.stderr
