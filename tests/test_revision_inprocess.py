"""Revisions as arms for an in-process engine (issue 34): each revision of an engine
library (tests/support/library_repo.py: llama-cpp-python's Python layer in a git
repository) built into its own venv, and each arm's llama.cpp engine run by that venv's
interpreter (``engine_options.python = "{build}/venv/bin/python"``,
abgate/engines/hosted.py), so that the arm imports its revision's ``llama_cpp`` and maps
its build's libraries. A no-op commit is ACCEPTED (12 items); a planted vocabulary-offset bug is
REJECTED on the quality gates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from abgate.compare.gates import FAIL
from tests.conftest import abgate, requested_threads
from tests.support.library_repo import PYTHON, build_command, make_library_repo
from tests.test_revision_ab import QUALITY, REJECT_ITEMS, small_pre_merge

pytestmark = pytest.mark.engine

N_ITEMS = 12  # with pre-merge at min_items = REJECT_ITEMS (8): the engine tier's budget


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rev-inproc")
    revs = make_library_repo(tmp / "llama-cpp-python")
    n = requested_threads(1)
    file = tmp / "pr.toml"
    file.write_text(f"""
name = "pr-in-process"
policy = "pre-merge"

[source]
repository = "{tmp / 'llama-cpp-python'}"
build = "{build_command()}"

[shared]
suite = "synthetic"
difficulty = "trivial"
limit = {N_ITEMS}
max_tokens = 16
engine = "llamacpp"
engine_args = {{ n_ctx = 1024, n_threads = {n}, n_threads_batch = {n} }}
engine_options = {{ python = "{PYTHON}" }}

[schedule]
mode = "interleave"
warmup = 1

[evidence]
agreement = false
probes = false

[arms.base]
[arms.head]
""")
    return {"tmp": tmp, "revs": revs, "file": file,
            "env": {"ABGATE_CACHE": str(tmp / "cache")}}


def run_rev(setup: dict[str, Any], head: str, *extra: str) -> tuple[Any, Path, dict[str, Any]]:
    out = setup["tmp"] / head
    r = abgate("ab", str(setup["file"]), "--rev", f"{setup['revs']['base']}..{head}", "-o",
               str(out), *extra, env=setup["env"])
    comp = json.loads((out / "comparison.json").read_text()) if out.exists() else {}
    return r, out, comp


@pytest.mark.cost(28)
def test_a_noop_commit_of_the_library_is_accepted_each_arm_in_its_build(
        setup: dict[str, Any]) -> None:
    r, out, comp = run_rev(setup, setup["revs"]["noop"], "--policy",
                           str(small_pre_merge(setup["tmp"])))
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert comp["decision"] == "ACCEPT"
    ab = json.loads((out / "ab.json").read_text())
    assert list(ab["differences"]["head"]["request"]["declared"]) == ["engine_options.python"]
    assert ab["differences"]["head"]["request"]["undeclared"] == {}
    for arm, b in ab["source"]["builds"].items():
        run = json.loads((out / "arms" / arm / "run.json").read_text())
        python = f"{b['directory']}/venv/bin/python"
        assert run["spec"]["engine_options"] == {"python": python}
        host = run["cleanup"]["hosted"]
        assert run["engine_processes"] == [host["pid"]] and host["python"] == python
        assert run["cleanup"]["verified"] and not psutil.pid_exists(host["pid"])
        # the host mapped this revision's build of libllama, not abgate's
        mapped = json.dumps(run["provenance"])
        assert f"{b['directory']}/venv/" in mapped and "libllama" in mapped, arm


@pytest.mark.cost(20)
def test_a_planted_vocabulary_offset_bug_is_rejected_on_quality(
        setup: dict[str, Any]) -> None:
    # with distribution agreement: at 16 tokens neither arm reaches an answer, so accuracy
    # cannot tell them apart; the teacher-forced scores (Engine.score through the host) can
    r, out, comp = run_rev(setup, "regression", "--policy", str(small_pre_merge(setup["tmp"])),
                           "--limit", str(REJECT_ITEMS), "--agreement")
    assert r.returncode == 1, (r.stdout, r.stderr[-3000:])
    assert comp["decision"] == "REJECT"
    outcome = {g["name"]: g["outcome"]
               for g in comp["comparisons"]["head"]["verdict"]["gates"]}
    failed = {g for g, o in outcome.items() if o == FAIL}
    assert failed and failed <= set(QUALITY), outcome
    assert {"mean_kld", "top1_agreement"} <= failed, outcome
