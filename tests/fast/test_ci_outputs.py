"""CI outputs (abgate.report.ci) through ``abgate report DIR --junit F --summary-md F`` on
a recorded A/B (the golden v1 A/B, copied): one JUnit testcase per gate, a failed gate
carrying the verdict line, the summary with the verdict, the gates, what differed and
the MDE, appended to $GITHUB_STEP_SUMMARY when set; bad output paths refused first.
The JUnit file is read by junitparser (tests/support/junit.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, abgate
from tests.support.junit import junit_cases

GOLDEN = REPO / "tests" / "data" / "golden" / "v1" / "ab"


def recorded(tmp_path: Path, edit: Any = None) -> Path:
    ab = tmp_path / "ab"
    shutil.copytree(GOLDEN, ab)
    if edit is not None:
        comp = json.loads((ab / "comparison.json").read_text())
        edit(comp)
        (ab / "comparison.json").write_text(json.dumps(comp))
    return ab


def test_an_inconclusive_ab_gives_skipped_cases_and_a_summary(tmp_path: Path) -> None:
    ab = recorded(tmp_path)
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    r = abgate("report", str(ab), "-o", str(tmp_path / "r.md"), "--junit",
               str(tmp_path / "j.xml"), "--summary-md", str(tmp_path / "s.md"),
               env={"GITHUB_STEP_SUMMARY": str(step)})
    assert r.returncode == 0, r.stderr
    cases = junit_cases(tmp_path / "j.xml")
    gates = [g["name"] for g in json.loads((ab / "comparison.json").read_text())
             ["comparisons"]["b"]["verdict"]["gates"]]
    assert list(cases) == gates
    assert cases["sample_size"][0] == "skipped" and cases["speed"][0] == "skipped"
    assert cases["accuracy"] == ("pass", "")
    md = (tmp_path / "s.md").read_text()
    assert md.startswith("## abgate: INCONCLUSIVE\n")
    assert ("| accuracy | pass | +0.0 pt | [+0.0 pt, +0.0 pt] | -5.0 pt | 3 scored; "
            "discordant 0 vs 0 |") in md
    assert "engine_args.perturb" in md  # what differed
    assert "### Minimum detectable effect" in md
    assert step.read_text() == "earlier step\n" + md  # appended, not replaced


def test_a_failed_gate_carries_the_verdict_line(tmp_path: Path) -> None:
    def reject(comp: dict[str, Any]) -> None:
        v = comp["comparisons"]["b"]["verdict"]
        v["decision"], v["exit_code"] = "REJECT", 1
        v["reasons"], v["explanation"] = ["REJECT: accuracy: dropped 40 points."], None
        next(g for g in v["gates"] if g["name"] == "accuracy")["outcome"] = "fail"
        comp["decision"], comp["exit_code"] = "REJECT", 1
        v["mde"] = {"power": 0.8, "n_items": 3, "gates": {"accuracy": {
            "detectable": 0.25, "unit": "accuracy drop", "bound": True}}}

    ab = recorded(tmp_path, reject)
    r = abgate("report", str(ab), "-o", str(tmp_path / "r.md"), "--junit",
               str(tmp_path / "j.xml"), "--summary-md", str(tmp_path / "s.md"))
    assert r.returncode == 0, r.stderr
    cases = junit_cases(tmp_path / "j.xml")
    assert cases["accuracy"] == ("failure",
                                 "b vs a: REJECT: accuracy: dropped 40 points.")
    assert [g for g, (res, _) in cases.items() if res == "failure"] == ["accuracy"]
    md = (tmp_path / "s.md").read_text()
    assert "## abgate: REJECT" in md and "| accuracy | **FAIL** |" in md
    assert ("- accuracy: detects 0.25 accuracy drop at power 0.8 with 3 items (an upper "
            "bound: no discordant pair seen)") in md  # the verdict's own MDE


@pytest.mark.parametrize("flag", ["--junit", "--summary-md"])
def test_a_bad_output_path_is_refused_before_anything(tmp_path: Path, flag: str) -> None:
    ab = recorded(tmp_path)
    for bad, why in ((tmp_path, "it is a directory"),
                     (tmp_path / "no" / "f", "does not exist")):
        r = abgate("report", str(ab), "-o", str(tmp_path / "r.md"), flag, str(bad))
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.splitlines()) == 1
        assert not (tmp_path / "r.md").exists()
