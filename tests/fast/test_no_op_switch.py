"""An engine arg that changes nothing the engine reports after the load (effective
configuration, model config, version, libraries identical to the baseline arm's) is a
warning in the verdict: the A/B then compares a configuration with itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy.random  # noqa: F401  (mapped before the first arm loads, as in a later run)

from abgate.ab import analyze, declared
from abgate.records.sections import ArmDifferences, DiffStage
from tests.support.fake import cli, experiment


def _notes(out: Path) -> list[str]:
    doc = json.loads((out / "comparison.json").read_text())
    return list(doc["comparisons"]["b"]["verdict"]["notes"])


WARNING = "arm b's declared switch engine_args.ignored changed nothing observable after load"


def test_an_ignored_override_is_a_warning_in_the_verdict(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "ignored = { rope_theta = 1.0 }", limit=4)
    exp.write_text(exp.read_text().replace("[arms.b]\n", "[arms.b]\nchanges = [\"ignored\"]\n"))
    out = tmp_path / "ab"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr + r.stdout
    ab = json.loads((out / "ab.json").read_text())
    assert ab["differences"]["b"]["unchanged"] == ["engine_args.ignored"]
    notes = _notes(out)
    assert any(WARNING in n and "effective config identical" in n for n in notes), notes
    assert WARNING in r.stdout + r.stderr or WARNING in (out / "report.md").read_text()


def test_a_switch_that_shows_after_the_load_is_no_warning(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "tpot_ms = 4.0", limit=4)
    out = tmp_path / "ab"
    cli("ab", str(exp), "-o", str(out))
    ab = json.loads((out / "ab.json").read_text())
    assert "unchanged" not in ab["differences"]["b"]
    notes = _notes(out)
    assert not any("changed nothing observable" in n for n in notes)


def test_the_request_echo_is_no_evidence() -> None:
    request = DiffStage(declared={"engine_args.hf_overrides": ["{}", '{"rope_theta":1}']})
    echo = DiffStage(declared={"effective.requested_engine_args": ["a", "b"]})
    assert declared.no_op(request, echo) == ["engine_args.hf_overrides"]
    seen = DiffStage(undeclared={"effective.hf_config_sha256": ["x", "y"]})
    assert declared.no_op(request, seen) == []
    env_only = DiffStage(declared={"env.VLLM_X": ["(not set)", "1"]})
    assert declared.no_op(env_only, DiffStage()) == []  # the opt-out evidence's case
    entry = ArmDifferences(request=request, loaded=echo, unchanged=["engine_args.hf_overrides"])
    assert any("arm b's declared switch engine_args.hf_overrides changed nothing" in w
               for w in analyze.difference_warnings(entry, "b"))
