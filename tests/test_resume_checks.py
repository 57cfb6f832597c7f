"""A resume trusts nothing it did not check (issue 26, items 3 and 8): every sample
line against the run's own keys, the shots it used, the source checkout it started
from; an A/B's arms share one git state. Workflow logic: on the fake engine, through
the CLI in this process."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from abgate.dirlock import LOCK_FILE
from abgate.engines import fake
from abgate.records.documents import RunRecord
from abgate.runner.documents import read_record
from tests.conftest import engine_refused, error_lines, read_lines
from tests.support.fake import cli, fake_loads
from tests.support.records import edit_record

BASE = ["--engine", "fake", "--suite", "synthetic", "--limit", "2", "--seeds", "0",
        "--max-tokens", "4"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "R"
    r = cli("run", *BASE, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert len(read_lines(out / "samples.jsonl")) == 2
    return out


def _interrupt(out: Path) -> None:
    """Mark a finished run interrupted, as a killed one is: a complete run's --resume only
    says "already complete" (nothing would be read or run), so these checks need one
    that would continue."""
    edit_record(out / "run.json", status="interrupted")


def _tampered(src: Path, tmp_path: Path, lines: list[str]) -> Path:
    out = tmp_path / "R"
    shutil.copytree(src, out)
    _interrupt(out)
    (out / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    return out


def _refused(tmp_path: Path, out: Path, *needles: str) -> None:
    """``--resume out`` exits 2 in one line with ``needles``, before any engine loads,
    and leaves the run directory as it was."""
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != LOCK_FILE}
    with fake_loads() as loads:
        r = cli("run", "--resume", str(out))
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr
    assert loads == []
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name != LOCK_FILE}
    assert after == before


def test_resume_refuses_a_duplicated_line(finished_run: Path, tmp_path: Path) -> None:
    lines = (finished_run / "samples.jsonl").read_text().splitlines()
    out = _tampered(finished_run, tmp_path, [lines[0], lines[1], lines[0]])
    _refused(tmp_path, out, f"{out / 'samples.jsonl'}:3:", "recorded twice (first at line 1)")


def test_resume_refuses_a_line_without_key(finished_run: Path, tmp_path: Path) -> None:
    lines = (finished_run / "samples.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["key"]
    out = _tampered(finished_run, tmp_path, [lines[0], json.dumps(broken)])
    _refused(tmp_path, out, f"{out / 'samples.jsonl'}:2:", "'key' is missing")


def test_resume_refuses_a_line_of_another_run(finished_run: Path, tmp_path: Path) -> None:
    lines = (finished_run / "samples.jsonl").read_text().splitlines()
    foreign = json.loads(lines[1])
    foreign.update(item_id="other-7", key="other-7#0")
    out = _tampered(finished_run, tmp_path, [lines[0], json.dumps(foreign)])
    _refused(tmp_path, out, f"{out / 'samples.jsonl'}:2:", "not one of this run's")


def test_resume_refuses_a_changed_shots_file(tmp_path: Path) -> None:
    shots = tmp_path / "shots.jsonl"
    shots.write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    out = tmp_path / "R"
    r = cli("run", *BASE, "--shots", "1", "--shots-file", str(shots), "-o", str(out))
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


def test_resume_refuses_a_checkout_made_dirty(tmp_path: Path) -> None:
    """The run (inside a clean checkout: its own directory does not make it dirty)
    resumes while the source is unchanged, and is refused once it is not."""
    repo = _clean_repo(tmp_path)
    r = cli("run", *BASE, "-o", "runs/R", cwd=repo)
    assert r.returncode == 0, r.stderr
    doc = json.loads((repo / "runs" / "R" / "run.json").read_text())
    assert doc["git"]["dirty"] is False
    _interrupt(repo / "runs" / "R")
    r = cli("run", "--resume", "runs/R", cwd=repo)
    assert r.returncode == 0, r.stderr
    resumes = json.loads((repo / "runs" / "R" / "run.json").read_text())["resumes"]
    assert [x["git"]["dirty"] for x in resumes] == [False]  # recorded per resume
    (repo / "README").write_text("edited\n")
    _interrupt(repo / "runs" / "R")
    with fake_loads() as loads:
        r = cli("run", "--resume", "runs/R", cwd=repo)
    assert r.returncode == 2, r.stderr
    assert "source checkout changed" in r.stderr and "clean then, dirty now" in r.stderr
    assert len(error_lines(r.stderr)) == 1 and loads == []
    _interrupt(repo / "runs" / "R")  # (the refusal left it as it was: interrupted)
    r = cli("run", "--resume", "runs/R", "--allow-source-change", cwd=repo)  # opt-in
    assert r.returncode == 0, r.stderr
    resumes = json.loads((repo / "runs" / "R" / "run.json").read_text())["resumes"]
    assert resumes[-1]["source_changed"] == "clean then, dirty now"
    assert resumes[-1]["git"]["dirty"] is True


def test_ab_arms_share_one_git_state_in_a_clean_checkout(tmp_path: Path) -> None:
    repo = _clean_repo(tmp_path)
    exp = tmp_path / "exp.toml"  # outside the checkout
    exp.write_text("""[shared]
engine = "fake"
suite = "synthetic"
limit = 1
max_tokens = 2
engine_args = { n_ctx = 512 }
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
[arms.a]
[arms.b]
""")
    r = cli("ab", str(exp), "-o", "runs/AB", cwd=repo)
    assert r.returncode in (0, 1, 3), r.stderr
    ab = repo / "runs" / "AB"
    states = [json.loads((ab / "ab.json").read_text())["git"]] + [
        json.loads((ab / "arms" / arm / "run.json").read_text())["git"] for arm in "ab"]
    assert all(s == states[0] for s in states), states
    assert states[0]["dirty"] is False


def test_resume_refuses_a_changed_effective_config(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same spec loading another effective configuration (llama.cpp's default thread
    count under another CPU affinity; here the fake's default context): the resume
    records its engine and is refused, naming the key, the first start's kept."""
    out = tmp_path / "R"
    r = cli("run", "--engine", "fake", "--suite", "synthetic", "--limit", "1",
            "--max-tokens", "2", "-o", str(out))
    assert r.returncode == 0, r.stderr
    _interrupt(out)
    monkeypatch.setattr(fake, "DEFAULTS", {**fake.DEFAULTS, "n_ctx": 2048})
    r = cli("run", "--resume", str(out))
    assert r.returncode == 1, r.stderr
    assert "effective configuration differs" in r.stderr and "n_ctx" in r.stderr
    assert len(error_lines(r.stderr)) == 1, r.stderr
    doc = read_record(out / "run.json", "run", model=RunRecord)
    assert doc.engine is not None and doc.engine.effective_config["n_ctx"] == 4096
    resumed = doc.resumes[-1].engine
    assert resumed is not None and resumed.effective_config["n_ctx"] == 2048


def test_resume_refuses_a_changed_or_dropped_contract(tmp_path: Path) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text('name = "small"\nengine = "fake"\n[settings]\nn_ctx = 512\n')
    out = tmp_path / "R"
    r = cli("run", *BASE, "--engine-arg", "n_ctx=512", "--contract", str(contract),
               "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "run.json").read_text())["inputs"]["contract"]
    _interrupt(out)
    _refused(tmp_path, out, "--contract differs", "now")  # resumed without it
    contract.write_text('name = "renamed"\nengine = "fake"\n[settings]\nn_ctx = 512\n')
    with fake_loads() as loads:
        r = cli("run", "--resume", str(out), "--contract", str(contract))
    assert r.returncode == 2 and "--contract differs" in r.stderr, r.stderr
    assert loads == []
