"""Revisions as arms, end to end (issue 34): ``abgate ab FILE --rev BASE..HEAD`` on a real
engine repository (tests/support/engine_repo.py: a Python engine package serving the
embedded SmolLM2 through llama-cpp-python), each revision built once into its own venv,
each arm served from its own build. A no-op commit is ACCEPTED, a planted sampling bug
REJECTED on the quality gates, a planted slowdown REJECTED on speed; a second run builds
nothing; the JUnit file and the Markdown summary say the same."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from abgate.compare.gates import FAIL, PASS
from tests.conftest import abgate, requested_threads
from tests.support.engine_repo import BUILD, LAUNCH, make_engine_repo

pytestmark = pytest.mark.engine

N_ITEMS = 32  # the policy's min_items is 30
QUALITY = ("accuracy", "invalid_rate", "truncated_rate", "error_rate", "repetition",
           "lossless_outputs", "lossless_kld", "identical_outputs", "length_change",
           "mean_kld", "top1_agreement")


def experiment(tmp: Path, repo: Path) -> Path:
    n = requested_threads(1)
    path = tmp / "pr.toml"
    path.write_text(f"""
name = "pr"
expect = "lossless"
policy = "pre-merge"

[source]
repository = "{repo}"
build = "{BUILD}"

[shared]
suite = "synthetic"
difficulty = "trivial"
limit = {N_ITEMS}
max_tokens = 24
engine = "openai"
engine_args = {{ n_ctx = 1024, n_threads = {n}, n_threads_batch = {n} }}
engine_options = {{ launch = "{LAUNCH}" }}

[schedule]
mode = "interleave"
warmup = 1

[evidence]
agreement = false
probes = false

[arms.base]
[arms.head]
""")
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rev")
    revs = make_engine_repo(tmp / "engine")
    return {"tmp": tmp, "revs": revs, "file": experiment(tmp, tmp / "engine"),
            "env": {"ABGATE_CACHE": str(tmp / "cache")}}


def run_rev(setup: dict[str, Any], head: str, name: str, *extra: str) -> tuple[
        Any, Path, dict[str, Any]]:
    out = setup["tmp"] / name
    r = abgate("ab", str(setup["file"]), "--rev", f"{setup['revs']['base']}..{head}", "-o",
               str(out), "--junit", str(out) + ".xml", "--summary-md", str(out) + ".md",
               *extra, env=setup["env"])
    comp = json.loads((out / "comparison.json").read_text()) if out.exists() else {}
    return r, out, comp


def gates(comp: dict[str, Any]) -> dict[str, str]:
    return {g["name"]: g["outcome"] for g in comp["comparisons"]["head"]["verdict"]["gates"]}


def junit_cases(path: Path) -> dict[str, str]:
    """testcase name -> pass/failure/skipped, read as a JUnit XML file."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    out = {}
    for case in suite.findall("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "skipped")]
        out[case.attrib["name"]] = kinds[0] if kinds else "pass"
    assert int(suite.attrib["tests"]) == len(out)
    assert int(suite.attrib["failures"]) == list(out.values()).count("failure")
    return out


def test_a_noop_commit_is_accepted_and_a_second_run_builds_nothing(
        setup: dict[str, Any]) -> None:
    r, out, comp = run_rev(setup, setup["revs"]["noop"], "noop")
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert comp["decision"] == "ACCEPT"
    ab = json.loads((out / "ab.json").read_text())
    builds = ab["source"]["builds"]
    assert {b["commit"] for b in builds.values()} == {setup["revs"]["base"],
                                                      setup["revs"]["noop"]}
    assert not any(b["cached"] for b in builds.values())
    for arm, b in builds.items():  # each arm ran its own build, whose log is kept
        assert (out / b["log"]).is_file() and b["duration_s"] > 0 and b["artifacts"]
        launch = ab["engines"][arm]["effective_config"]["launch"]
        assert launch[0] == f"{b['directory']}/venv/bin/python", launch
    assert ab["differences"]["head"]["request"]["undeclared"] == {}
    assert list(ab["differences"]["head"]["request"]["declared"]) == [
        "engine_options.launch"]
    assert set(junit_cases(Path(str(out) + ".xml")).values()) == {"pass"}
    md = Path(str(out) + ".md").read_text()
    assert "## abgate: ACCEPT" in md and "| speed | pass |" in md
    assert "Minimum detectable effect" in md and setup["revs"]["noop"][:12] in md
    # the same revisions again: both builds cached, nothing built
    again = setup["tmp"] / "noop-again"
    r2 = abgate("ab", str(setup["file"]), "--rev", f"{setup['revs']['base']}..main", "-o",
                str(again), "--limit", "2", env=setup["env"])
    assert r2.returncode in (0, 3), r2.stderr[-3000:]
    assert r2.stderr.count("cached, nothing built") == 2
    rebuilt = json.loads((again / "ab.json").read_text())["source"]["builds"]
    assert all(b["cached"] for b in rebuilt.values())
    assert {a: b["artifacts_digest"] for a, b in rebuilt.items()} == {
        a: b["artifacts_digest"] for a, b in builds.items()}


def test_a_planted_sampling_bug_is_rejected_on_quality(setup: dict[str, Any]) -> None:
    r, out, comp = run_rev(setup, "regression", "regression")
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    assert comp["decision"] == "REJECT"
    failed = {g for g, o in gates(comp).items() if o == FAIL}
    assert failed and failed <= set(QUALITY), gates(comp)
    assert "repetition" in failed  # repeat_penalty 0.5: degenerate loops
    cases = junit_cases(Path(str(out) + ".xml"))
    assert {g for g, k in cases.items() if k == "failure"} == failed
    md = Path(str(out) + ".md").read_text()
    assert "## abgate: REJECT" in md and "| repetition | **FAIL** |" in md


def test_a_planted_slowdown_is_rejected_on_speed(setup: dict[str, Any]) -> None:
    r, out, comp = run_rev(setup, setup["revs"]["slowdown"], "slowdown")
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    outcome = gates(comp)
    assert outcome["speed"] == FAIL, outcome
    assert all(outcome[g] == PASS for g in QUALITY if g in outcome), outcome
    cases = junit_cases(Path(str(out) + ".xml"))
    assert [g for g, k in cases.items() if k == "failure"] == ["speed"]
