"""A resume trusts nothing it did not check (issue 26, items 3 and 8): every sample
line against the run's own keys, the shots it used, the source checkout it started
from; an A/B's arms share one git state. Real runs on the embedded engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from abgate.dirlock import LOCK_FILE
from tests.conftest import (
    HANG_S,
    abgate,
    engine_refused,
    error_lines,
    no_engine_env,
    read_lines,
    thread_flags,
    toml_engine_args,
)
from tests.support.fake import cli

BASE = ["--suite", "synthetic", "--limit", "2", "--seeds", "0", "--max-tokens", "4",
        *thread_flags(1)]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "R"
    r = abgate("run", *BASE, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert len(read_lines(out / "samples.jsonl")) == 2
    return out


def _interrupt(out: Path) -> None:
    """Mark a finished run interrupted, as a killed one is: a complete run's --resume only
    says "already complete" (nothing would be read or run), so these checks need one
    that would continue."""
    doc = json.loads((out / "run.json").read_text())
    doc["status"] = "interrupted"
    (out / "run.json").write_text(json.dumps(doc))


def _tampered(src: Path, tmp_path: Path, lines: list[str]) -> Path:
    out = tmp_path / "R"
    shutil.copytree(src, out)
    _interrupt(out)
    (out / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    return out


def _refused(tmp_path: Path, out: Path, *needles: str) -> None:
    """``--resume out`` exits 2 in one line with ``needles``, before any engine loads,
    and leaves the run directory as it was."""
    env, marker = no_engine_env(tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != LOCK_FILE}
    r = abgate("run", "--resume", str(out), env=env)
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr
    assert not marker.exists()
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name != LOCK_FILE}
    assert after == before


@pytest.mark.engine
def test_resume_refuses_a_duplicated_line(finished_run: Path, tmp_path: Path) -> None:
    lines = (finished_run / "samples.jsonl").read_text().splitlines()
    out = _tampered(finished_run, tmp_path, [lines[0], lines[1], lines[0]])
    _refused(tmp_path, out, f"{out / 'samples.jsonl'}:3:", "recorded twice (first at line 1)")


@pytest.mark.engine
def test_resume_refuses_a_line_without_key(finished_run: Path, tmp_path: Path) -> None:
    lines = (finished_run / "samples.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["key"]
    out = _tampered(finished_run, tmp_path, [lines[0], json.dumps(broken)])
    _refused(tmp_path, out, f"{out / 'samples.jsonl'}:2:", "'key' is missing")


@pytest.mark.engine
def test_resume_refuses_a_line_of_another_run(finished_run: Path, tmp_path: Path) -> None:
    lines = (finished_run / "samples.jsonl").read_text().splitlines()
    foreign = json.loads(lines[1])
    foreign.update(item_id="other-7", key="other-7#0")
    out = _tampered(finished_run, tmp_path, [lines[0], json.dumps(foreign)])
    _refused(tmp_path, out, f"{out / 'samples.jsonl'}:2:", "not one of this run's")


@pytest.mark.engine
def test_resume_refuses_a_changed_shots_file(tmp_path: Path) -> None:
    shots = tmp_path / "shots.jsonl"
    shots.write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    out = tmp_path / "R"
    r = abgate("run", *BASE, "--shots", "1", "--shots-file", str(shots), "-o", str(out))
    assert r.returncode == 0, r.stderr
    shots.write_text('{"question": "What is 2 + 2?", "answer": "4"}\n')
    _interrupt(out)
    _refused(tmp_path, out, "spec differs", "prompt.shots_sha256")


def test_shots_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    shots = tmp_path / "shots.jsonl"
    shots.write_bytes(b'{"question": "\xff", "answer": "2"}\n')
    with engine_refused() as imported:  # the CLI in this process
        r = cli("run", *BASE, "--shots", "1", "--shots-file", str(shots), "-o",
                str(tmp_path / "R"))
    assert r.returncode == 2 and "not UTF-8" in r.stderr and str(shots) in r.stderr, r.stderr
    assert len(error_lines(r.stderr)) == 1
    assert not (tmp_path / "R").exists() and not imported


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def _clean_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text("project\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


@pytest.mark.engine
def test_resume_refuses_a_checkout_made_dirty(tmp_path: Path) -> None:
    """The run (inside a clean checkout: its own directory does not make it dirty)
    resumes while the source is unchanged, and is refused once it is not."""
    repo = _clean_repo(tmp_path)
    r = abgate("run", *BASE, "-o", "runs/R", cwd=repo)
    assert r.returncode == 0, r.stderr
    doc = json.loads((repo / "runs" / "R" / "run.json").read_text())
    assert doc["git"]["dirty"] is False
    _interrupt(repo / "runs" / "R")
    r = abgate("run", "--resume", "runs/R", cwd=repo)
    assert r.returncode == 0, r.stderr
    resumes = json.loads((repo / "runs" / "R" / "run.json").read_text())["resumes"]
    assert [x["git"]["dirty"] for x in resumes] == [False]  # recorded per resume
    (repo / "README").write_text("edited\n")
    _interrupt(repo / "runs" / "R")
    env, marker = no_engine_env(tmp_path)
    r = abgate("run", "--resume", "runs/R", cwd=repo, env=env)
    assert r.returncode == 2, r.stderr
    assert "source checkout changed" in r.stderr and "clean then, dirty now" in r.stderr
    assert len(error_lines(r.stderr)) == 1 and not marker.exists()
    _interrupt(repo / "runs" / "R")  # (the refusal left it as it was: interrupted)
    r = abgate("run", "--resume", "runs/R", "--allow-source-change", cwd=repo)  # opt-in
    assert r.returncode == 0, r.stderr
    resumes = json.loads((repo / "runs" / "R" / "run.json").read_text())["resumes"]
    assert resumes[-1]["source_changed"] == "clean then, dirty now"
    assert resumes[-1]["git"]["dirty"] is True


@pytest.mark.engine
def test_ab_arms_share_one_git_state_in_a_clean_checkout(tmp_path: Path) -> None:
    repo = _clean_repo(tmp_path)
    exp = tmp_path / "exp.toml"  # outside the checkout
    exp.write_text(f"""[shared]
suite = "synthetic"
limit = 1
max_tokens = 2
engine_args = {toml_engine_args({"n_ctx": 512}, 1)}
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
[arms.a]
[arms.b]
""")
    r = abgate("ab", str(exp), "-o", "runs/AB", cwd=repo)
    assert r.returncode in (0, 1, 3), r.stderr
    ab = repo / "runs" / "AB"
    states = [json.loads((ab / "ab.json").read_text())["git"]] + [
        json.loads((ab / "arms" / arm / "run.json").read_text())["git"] for arm in "ab"]
    assert all(s == states[0] for s in states), states
    assert states[0]["dirty"] is False


def _pinned(cpus: set[int]) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, cpus)


@pytest.mark.engine
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable CPUs")
def test_resume_refuses_a_changed_effective_config(tmp_path: Path) -> None:
    """The same spec under another CPU affinity loads llama.cpp with another default
    thread count: the resume records its engine and is refused, naming n_threads."""
    cpus = sorted(os.sched_getaffinity(0))
    out = tmp_path / "R"
    base = ["run", "--suite", "synthetic", "--limit", "1", "--max-tokens", "2", "-o", str(out)]
    r = subprocess.run([sys.executable, "-m", "abgate", *base], capture_output=True, text=True,
                       preexec_fn=_pinned({cpus[0]}), timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    _interrupt(out)
    r = subprocess.run([sys.executable, "-m", "abgate", "run", "--resume", str(out)],
                       capture_output=True, text=True, preexec_fn=_pinned(set(cpus[:2])),
                       timeout=HANG_S)
    assert r.returncode == 1, r.stderr
    assert "effective configuration differs" in r.stderr and "n_threads" in r.stderr
    assert len(error_lines(r.stderr)) == 1, r.stderr
    doc = json.loads((out / "run.json").read_text())
    assert doc["engine"]["effective_config"]["n_threads"] == 1  # the first start's, kept
    assert doc["resumes"][-1]["engine"]["effective_config"]["n_threads"] == 2


@pytest.mark.engine
def test_resume_refuses_a_changed_or_dropped_contract(tmp_path: Path) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text('name = "small"\nengine = "llamacpp"\n[settings]\nn_ctx = 512\n')
    out = tmp_path / "R"
    r = abgate("run", *BASE, "--engine-arg", "n_ctx=512", "--contract", str(contract),
               "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "run.json").read_text())["inputs"]["contract"]
    _interrupt(out)
    _refused(tmp_path, out, "--contract differs", "now")  # resumed without it
    contract.write_text('name = "renamed"\nengine = "llamacpp"\n[settings]\nn_ctx = 512\n')
    (tmp_path / "again").mkdir()
    env, marker = no_engine_env(tmp_path / "again")
    r = abgate("run", "--resume", str(out), "--contract", str(contract), env=env)
    assert r.returncode == 2 and "--contract differs" in r.stderr, r.stderr
    assert not marker.exists()
