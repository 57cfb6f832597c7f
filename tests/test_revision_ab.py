"""Revisions as arms, end to end (issue 34): ``abgate ab FILE --rev BASE..HEAD`` on a real
engine repository (tests/support/engine_repo.py: a Python engine package serving the
embedded SmolLM2 through llama-cpp-python), each revision built once into its own venv,
each arm served from its own build. A no-op commit is ACCEPTED, a planted sampling bug
REJECTED on the quality gates, a planted slowdown REJECTED on speed; a second run builds
nothing; the JUnit file (read by junitparser) and the Markdown summary say the same.

One test, the A/Bs in that order on one build cache: the no-op's run builds the base
(nothing cached yet), which the regressions' A/Bs then reuse (it was built twice when the
no-op had a cache of its own, for pytest-randomly's order of three tests). Every A/B
decides from the pre-merge policy at min_items = 8 and a ±25% speed margin (its quality
gates the same: SPEED_MARGIN says why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import abgate as abgate_pkg
from abgate.compare.gates import FAIL, PASS
from tests.conftest import abgate, requested_threads
from tests.support.engine_repo import BUILD, LAUNCH, git, make_engine_repo
from tests.support.fake import cli
from tests.support.junit import junit_cases

pytestmark = pytest.mark.engine

N_ITEMS = 32  # the shipped policy's min_items is 30 (the file's limit)
# Pre-merge with min_items = 8 (its gates the same): a planted regression is REJECTED from
# 8 items, and the no-op ACCEPTED from 12 (as tests/test_revision_inprocess.py's), so that
# A/Bs of 32 items are not spent on showing what 8 or 12 show.
REJECT_ITEMS = 8
NOOP_ITEMS = 12
QUALITY = ("accuracy", "invalid_rate", "truncated_rate", "error_rate", "repetition",
           "lossless_outputs", "lossless_kld", "identical_outputs", "length_change",
           "mean_kld", "top1_agreement")


def experiment(tmp: Path, repo: Path) -> Path:
    n = requested_threads(1)
    path = tmp / "pr.toml"
    path.write_text(f"""
name = "pr"
policy = "pre-merge"

[source]
repository = "{repo}"
build = "{BUILD}"

[shared]
suite = "synthetic"
difficulty = "trivial"
limit = {N_ITEMS}
max_tokens = 16
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


# The speed margin of the small policy. A no-op's 12 items of 16 tokens on CI's loaded 2-core
# runner spread ±21% (SD) item to item, so pre-merge's ±10% gave INCONCLUSIVE at -1.6%
# (CI, stop 47): the verdict then measured the runner's load, not the change. The planted
# slowdown (30 ms per token, several decode steps) is far past ±25%.
SPEED_MARGIN = 0.25


def small_pre_merge(tmp: Path) -> Path:
    """The shipped pre-merge policy deciding from REJECT_ITEMS items, its quality gates the
    same and its speed margin SPEED_MARGIN."""
    text = (Path(abgate_pkg.__file__).parent / "policies" / "pre-merge.toml").read_text()
    assert text.count("\n[speed]") == 1 and "min_items" not in text
    margins = ("min_speedup = -0.10\n", "max_slowdown = 0.10\n")
    assert all(text.count(m) == 1 for m in margins), margins
    text = text.replace(margins[0], f"min_speedup = -{SPEED_MARGIN}\n").replace(
        margins[1], f"max_slowdown = {SPEED_MARGIN}\n")
    path = tmp / "pre-merge-small.toml"
    path.write_text(text.replace("\n[speed]", f"\nmin_items = {REJECT_ITEMS}\n\n[speed]", 1))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rev")
    revs = make_engine_repo(tmp / "engine")
    return {"tmp": tmp, "revs": revs, "file": experiment(tmp, tmp / "engine"),
            "env": {"ABGATE_CACHE": str(tmp / "cache")},
            "reject": ("--policy", str(small_pre_merge(tmp)), "--limit", str(REJECT_ITEMS))}


def run_rev(setup: dict[str, Any], head: str, name: str, *extra: str,
            env: dict[str, str] | None = None) -> tuple[Any, Path, dict[str, Any]]:
    out = setup["tmp"] / name
    r = abgate("ab", str(setup["file"]), "--rev", f"{setup['revs']['base']}..{head}", "-o",
               str(out), "--junit", str(out) + ".xml", "--summary-md", str(out) + ".md",
               *extra, env=env or setup["env"])
    comp = json.loads((out / "comparison.json").read_text()) if out.exists() else {}
    return r, out, comp


def gates(comp: dict[str, Any]) -> dict[str, str]:
    return {g["name"]: g["outcome"] for g in comp["comparisons"]["head"]["verdict"]["gates"]}


def decided_from_the_small_policy(comp: dict[str, Any],
                                  n_items: int = REJECT_ITEMS) -> None:
    head = comp["comparisons"]["head"]
    assert head["verdict"]["policy"]["min_items"] == REJECT_ITEMS
    assert head["verdict"]["policy"]["speed"]["min_speedup"] == -SPEED_MARGIN
    assert head["comparison"]["n_items"] == n_items


@pytest.mark.cost(63)
def test_noop_accepted_then_planted_regressions_rejected(setup: dict[str, Any]) -> None:
    """The three A/Bs in order on one cache: the no-op first (it builds the base)."""
    _a_noop_commit_is_accepted_and_a_second_run_builds_nothing(setup)
    _a_planted_sampling_bug_is_rejected_on_quality(setup)
    _a_planted_slowdown_is_rejected_on_speed(setup)


def _a_noop_commit_is_accepted_and_a_second_run_builds_nothing(
        setup: dict[str, Any]) -> None:
    env = setup["env"]  # nothing built into it yet: the no-op's A/B runs first
    r, out, comp = run_rev(setup, setup["revs"]["noop"], "noop", "--policy",
                           setup["reject"][1], "--limit", str(NOOP_ITEMS), env=env)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert comp["decision"] == "ACCEPT"
    decided_from_the_small_policy(comp, NOOP_ITEMS)
    ab = json.loads((out / "ab.json").read_text())
    builds = ab["source"]["builds"]
    assert {b["commit"] for b in builds.values()} == {setup["revs"]["base"],
                                                      setup["revs"]["noop"]}
    assert not any(b["cached"] for b in builds.values())
    for arm, b in builds.items():  # each arm ran its own build, whose log is kept
        assert (out / b["log"]).is_file() and b["duration_s"] > 0 and b["artifacts"]
        run = json.loads((out / "arms" / arm / "run.json").read_text())
        launch = run["engine"]["effective"]["launch"]
        assert launch[0] == f"{b['directory']}/venv/bin/python", launch
    assert ab["differences"]["head"]["request"]["undeclared"] == {}
    assert list(ab["differences"]["head"]["request"]["declared"]) == [
        "engine_options.launch"]
    assert {k for k, _ in junit_cases(Path(str(out) + ".xml")).values()} == {"pass"}
    md = Path(str(out) + ".md").read_text()
    assert "## abgate: ACCEPT" in md and "| speed | pass |" in md
    assert "Minimum detectable effect" in md and setup["revs"]["noop"][:12] in md
    # decide and attach read and write records, no engine: the CLI in this process
    decided = cli("decide", str(out), "--decision", "keep-default-on", "--why",
                  "the no-op refactor gated ACCEPT")
    assert decided.returncode == 0, decided.stderr
    # attached to a commit of the head's tree (a merge of the up-to-date branch), and
    # refused for another tree
    engine = setup["tmp"] / "engine"
    git(engine, "commit", "-q", "--allow-empty", "-m", "merge")
    attached = cli("attach", str(out), "--commit", "main", "--repo", str(engine))
    assert attached.returncode == 0, attached.stderr
    assert (out / "attachments.jsonl").is_file()
    other = cli("attach", str(out), "--commit", "regression", "--repo", str(engine))
    assert other.returncode != 0 and "trees differ" in other.stderr
    # the same revisions again: both builds cached, nothing built
    again = setup["tmp"] / "noop-again"
    r2 = abgate("ab", str(setup["file"]), "--rev", f"{setup['revs']['base']}..main", "-o",
                str(again), "--limit", "2", env=env)
    assert r2.returncode in (0, 3), r2.stderr[-3000:]
    assert r2.stderr.count("cached, nothing built") == 2
    rebuilt = json.loads((again / "ab.json").read_text())["source"]["builds"]
    assert all(b["cached"] for b in rebuilt.values())
    assert {a: b["artifacts_digest"] for a, b in rebuilt.items()} == {
        a: b["artifacts_digest"] for a, b in builds.items()}


def _a_planted_sampling_bug_is_rejected_on_quality(setup: dict[str, Any]) -> None:
    r, out, comp = run_rev(setup, "regression", "regression", *setup["reject"])
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    assert comp["decision"] == "REJECT"
    decided_from_the_small_policy(comp)
    failed = {g for g, o in gates(comp).items() if o == FAIL}
    assert failed and failed <= set(QUALITY), gates(comp)
    assert "repetition" in failed  # repeat_penalty 0.5: degenerate loops
    cases = junit_cases(Path(str(out) + ".xml"))
    assert {g for g, (k, _) in cases.items() if k == "failure"} == failed
    md = Path(str(out) + ".md").read_text()
    assert "## abgate: REJECT" in md and "| repetition | **FAIL** |" in md


def _a_planted_slowdown_is_rejected_on_speed(setup: dict[str, Any]) -> None:
    r, out, comp = run_rev(setup, setup["revs"]["slowdown"], "slowdown", *setup["reject"])
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    decided_from_the_small_policy(comp)
    outcome = gates(comp)
    assert outcome["speed"] == FAIL, outcome
    assert all(outcome[g] == PASS for g in QUALITY if g in outcome), outcome
    cases = junit_cases(Path(str(out) + ".xml"))
    assert [g for g, (k, _) in cases.items() if k == "failure"] == ["speed"]
