"""``abgate plan`` (issue 34 item 4): each gate's MDE at the planned N, checked against
simulation over many resampled trials of a recorded real run, and the N a target needs;
every verdict records the MDE it had."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from abgate.compare.plan import gate_specs, mde_at, needed_for
from abgate.compare.policy import load_policy
from tests.conftest import REPO
from tests.support.fake import ACCEPT_ARGS, cli, experiment

RECORDED = REPO / "benchmarks" / "results" / "gpu" / "vllm" / "ab-fp8" / "ab"  # vLLM, GSM8K


def _plan_check():  # type: ignore[no-untyped-def]
    path = REPO / "benchmarks" / "plan_check.py"
    spec = importlib.util.spec_from_file_location("plan_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["plan_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("arm", "n_items"), [("fp8", 1319), ("fp8", 400), ("fp8-kv8", 1319)])
def test_the_stated_mde_is_detected_at_the_stated_power(arm: str, n_items: int) -> None:
    """Resampled from a recorded real A/B (vLLM fp8 against bf16 on GSM8K, H200): a true
    effect at the plan's MDE fails the gate in 80% +- 5 points of 2000 trials."""
    checks = _plan_check().check_run(RECORDED, arm, n_items, 2000, load_policy(None))
    assert {c.gate for c in checks} == {"accuracy", "speed"}
    for c in checks:
        assert abs(c.simulated_power - c.stated_power) <= 0.05, c
    # and an effect well inside the MDE is not detected at that power
    plan_check = _plan_check()
    comparison, base, cand = plan_check.recorded(RECORDED, arm)
    values = plan_check.per_item(RECORDED, base, cand, "steady_decode_tps")
    spec = next(s for s in gate_specs(comparison, load_policy(None)) if s.name == "accuracy")
    half = plan_check.simulate(values["accuracy"], spec, load_policy(None), n_items // 4, 2000)
    assert half.simulated_power < 0.8 - 0.05 or half.detectable > spec.threshold


def test_pairing_against_tensorrt_llm() -> None:
    """TensorRT-LLM: 4.8 points at n = 1,319 (unpaired, alpha 0.05, power 80%); the
    paired MDE from the recorded run's discordance is below it."""
    comparison, _, _ = _plan_check().recorded(RECORDED, "fp8")
    trt = _plan_check().trt_comparison(comparison)
    assert trt["discordant"] == 5 and trt["items_recorded"] == 100
    assert trt["paired"] < trt["trt_unpaired_worst_case"] / 2


def test_the_items_needed_for_a_target_reach_it() -> None:
    comparison, _, _ = _plan_check().recorded(RECORDED, "fp8")
    policy = load_policy(None)
    for spec in gate_specs(comparison, policy):
        if spec.sigma == 0.0:  # no variation at all (no engine error): nothing to plan
            continue
        at = mde_at(spec, 200, policy.power)
        assert at.detectable is not None
        target = at.detectable  # the N for the MDE at 200 items is about 200
        need = needed_for(spec, target, policy.power)
        assert need is not None and abs(need - 200) <= 1, spec
        assert needed_for(spec, spec.threshold, policy.power) is None  # not beyond it


def _ab(tmp_path: Path) -> tuple[Path, Path]:
    exp = experiment(tmp_path / "e.toml", ACCEPT_ARGS + ", accuracy = 0.8", limit=30,
                     agreement=False)
    out = tmp_path / "ab"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stdout + r.stderr
    return exp, out


def test_every_verdict_records_its_mde(tmp_path: Path) -> None:
    _, out = _ab(tmp_path)
    verdict = json.loads((out / "comparison.json").read_text())["comparisons"]["b"]["verdict"]
    mde = verdict["mde"]
    assert mde["n_items"] == 30 and mde["power"] == 0.8
    assert {"accuracy", "speed", "invalid_rate"} <= set(mde["gates"])
    assert mde["gates"]["accuracy"]["detectable"] > 0.05  # beyond the 5-point margin
    assert "MDE" in (out / "report.md").read_text()


def test_plan_from_a_prior_run_and_from_a_pilot(tmp_path: Path) -> None:
    exp, prior = _ab(tmp_path)
    r = cli("plan", str(exp), "--from", str(prior), "--items", "300", "--target",
            "accuracy=0.15", "--json", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "b accuracy: at 300 items detects accuracy drop" in r.stdout
    assert "unpaired for reference" in r.stdout
    doc = json.loads((tmp_path / "plan.json").read_text())
    acc = next(row for row in doc["rows"] if row["gate"] == "accuracy")
    assert acc["n_planned"] == 300 and acc["n_needed"] >= 1
    # at fewer items the same gate detects only a larger effect
    small = cli("plan", str(exp), "--from", str(prior), "--items", "30", "--json",
                str(tmp_path / "small.json"))
    assert small.returncode == 0
    acc30 = next(row for row in json.loads((tmp_path / "small.json").read_text())["rows"]
                 if row["gate"] == "accuracy")
    assert acc30["detectable"] > acc["detectable"]
    pilot = cli("plan", str(exp), "--pilot", "8", "-o", str(tmp_path / "pilot"))
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    assert "noise from pilot of 8 items" in pilot.stdout
    assert (tmp_path / "pilot" / "comparison.json").is_file()


@pytest.mark.parametrize(("args", "message"), [
    ((), "give either --from AB_DIR"),
    (("--from", "nowhere"), "no comparison.json"),
    (("--pilot", "8"), "--pilot needs -o DIR"),
    (("--from", "x", "--target", "accuracy"), "expected GATE=VALUE"),
])
def test_bad_plan_input_is_one_line(tmp_path: Path, args: tuple[str, ...],
                                    message: str) -> None:
    exp = experiment(tmp_path / "e.toml", ACCEPT_ARGS)
    r = cli("plan", str(exp), *(str(tmp_path / a) if a in ("nowhere", "x") else a
                                for a in args))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
