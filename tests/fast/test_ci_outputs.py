"""CI outputs (abgate.report.ci) through ``abgate report DIR --junit F --summary-md F`` on
a recorded A/B (the golden v1 A/B, copied): one JUnit testcase per gate, a failed gate
carrying the verdict line, the summary with the verdict, the gates, what differed and
the MDE, appended to $GITHUB_STEP_SUMMARY when set; bad output paths refused first.
The JUnit file is read by junitparser when it is importable, else by xml.etree with a
schema-shaped check of the JUnit elements and attributes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, abgate

GOLDEN = REPO / "tests" / "data" / "golden" / "v1" / "ab"
SUITE_ATTRS = {"name", "tests", "failures", "errors", "skipped"}
CASE_CHILDREN = {"failure", "skipped", "error", "system-out", "system-err"}


def junit(path: Path) -> dict[str, tuple[str, str]]:
    """testcase name -> (result, message), validated as JUnit XML."""
    if importlib.util.find_spec("junitparser") is not None:  # pragma: no cover
        from junitparser import JUnitXml

        xml = JUnitXml.fromfile(str(path))
        out = {}
        for suite in xml:
            for case in suite:
                res = case.result[0] if case.result else None
                out[case.name] = (type(res).__name__.lower() if res else "pass",
                                  res.message if res else "")
        return out
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and {"tests", "failures"} <= set(root.attrib)
    out = {}
    for suite in root:
        assert suite.tag == "testsuite" and set(suite.attrib) >= SUITE_ATTRS
        cases = list(suite)
        assert all(c.tag == "testcase" and {"name", "classname"} <= set(c.attrib)
                   for c in cases)
        assert int(suite.attrib["tests"]) == len(cases)
        for case in cases:
            assert {c.tag for c in case} <= CASE_CHILDREN
            res = [c for c in case if c.tag in ("failure", "skipped", "error")]
            assert len(res) <= 1
            out[case.attrib["name"]] = (res[0].tag, res[0].attrib.get("message", "")) \
                if res else ("pass", "")
        assert int(suite.attrib["failures"]) == sum(r == "failure" for r, _ in out.values())
    return out


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
    cases = junit(tmp_path / "j.xml")
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

    ab = recorded(tmp_path, reject)
    r = abgate("report", str(ab), "-o", str(tmp_path / "r.md"), "--junit",
               str(tmp_path / "j.xml"), "--summary-md", str(tmp_path / "s.md"))
    assert r.returncode == 0, r.stderr
    cases = junit(tmp_path / "j.xml")
    assert cases["accuracy"] == ("failure",
                                 "b vs a: REJECT: accuracy: dropped 40 points.")
    assert [g for g, (res, _) in cases.items() if res == "failure"] == ["accuracy"]
    md = (tmp_path / "s.md").read_text()
    assert "## abgate: REJECT" in md and "| accuracy | **FAIL** |" in md


@pytest.mark.parametrize("flag", ["--junit", "--summary-md"])
def test_a_bad_output_path_is_refused_before_anything(tmp_path: Path, flag: str) -> None:
    ab = recorded(tmp_path)
    for bad, why in ((tmp_path, "it is a directory"),
                     (tmp_path / "no" / "f", "does not exist")):
        r = abgate("report", str(ab), "-o", str(tmp_path / "r.md"), flag, str(bad))
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.splitlines()) == 1
        assert not (tmp_path / "r.md").exists()
