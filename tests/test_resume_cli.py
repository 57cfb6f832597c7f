"""``--resume`` says what it is given: a directory that is not a run or an A/B is refused
before anything loads, a complete one is "already complete" (nothing rerun, nothing
loaded), ``--reanalyse`` / ``--force`` say what they redo, and a reopened complete
record is never downgraded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.runner import RunConfig, prepare
from abgate.runner.execute import RunRecorder, kept_status
from tests.conftest import (
    abgate,
    engine_refused,
    no_engine_env,
    read_lines,
    thread_flags,
    toml_engine_args,
)
from tests.support.fake import cli

AA = f"""
[shared]
suite = "synthetic"
difficulty = "trivial"
limit = 2
max_tokens = 16
engine_args = {toml_engine_args({"n_ctx": 512}, default_threads=1)}
[schedule]
warmup = 0
[evidence]
probes = false
[arms.a1]
[arms.a2]
"""


def one_line_error(r: object, *texts: str) -> None:
    err = getattr(r, "stderr", "")
    assert getattr(r, "returncode", None) == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for text in texts:
        assert text in err, (text, err)


def test_not_a_run_is_refused_before_anything_loads(tmp_path: Path) -> None:
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine\n")
    with engine_refused() as imported:  # the commands run in this process
        # the hub data would take a download to fail; the directory is refused first
        r = cli("run", "--resume", str(stray), "--data", "hf:openai/gsm8k")
        one_line_error(r, f"--resume {stray}: not a run directory (no run.json)",
                       "nothing to resume")
        one_line_error(cli("run", "--resume", str(tmp_path / "nope")), "no such directory")
        one_line_error(cli("run", "--resume", str(stray / "notes.txt")), "not a directory")
        one_line_error(cli("ab", "--resume", str(stray)),
                       f"--resume {stray}: not an A/B directory (no ab.json)")
        (stray / "ab.json").write_text("{}")  # an A/B's directory given to `run`: name `ab`
        one_line_error(cli("run", "--resume", str(stray)), f"abgate ab --resume {stray}")
        one_line_error(cli("ab", "--reanalyse", "-o", str(stray)),
                       "--reanalyse needs --resume")
    assert not imported
    assert sorted(p.name for p in stray.iterdir()) == ["ab.json", "notes.txt"]


def test_kept_status_never_downgrades_complete() -> None:
    assert kept_status("complete", "interrupted") == "complete"
    assert kept_status("complete", "failed") == "complete"
    assert kept_status("interrupted", "interrupted") == "interrupted"
    assert kept_status(None, "failed") == "failed"


@pytest.mark.engine
def test_complete_run_is_already_complete(tmp_path: Path) -> None:
    out = tmp_path / "R"
    base = ["run", "--suite", "synthetic", "--limit", "2", *thread_flags(default=1),
            "--max-tokens", "16"]
    assert abgate(*base, "-o", str(out)).returncode == 0
    # the records, byte for byte; the lock file names its last holder (a resume takes the
    # directory's lock to check that nothing is left to finish)
    def records() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".abgate.lock"}

    before = records()
    env, imported = no_engine_env(tmp_path)
    r = abgate("run", "--resume", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert f"run {out} is already complete (2 samples); nothing to resume" in r.stderr
    assert "complete" in r.stdout and "2" in r.stdout  # its summary table
    one_line_error(abgate("run", "--resume", str(out), "--max-tokens", "17", env=env),
                   "already complete", "the options given change its max_tokens")
    assert abgate("run", "--resume", str(out), "--max-tokens", "16", env=env).returncode == 0
    assert not imported.exists()
    assert records() == before

    # reopened by the library and then interrupted: the record stays complete
    doc = json.loads((out / "run.json").read_text())
    recorder = RunRecorder(prepare(RunConfig.from_dict(doc["config"], "config")), out,
                           resume=True, force=False, git=doc.get("git"))
    recorder.finish("interrupted", "interrupted by the user")
    after = json.loads((out / "run.json").read_text())
    assert after["status"] == "complete" and after["error"] is None
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
    assert len(read_lines(out / "samples.jsonl")) == 2

    # --force with --resume runs the recorded configuration again, and says so
    r = abgate("run", "--resume", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert "--force: running the complete run" in r.stderr
    assert json.loads((out / "run.json").read_text())["resumes"] == []


@pytest.mark.engine
def test_complete_ab_is_already_complete_and_reanalyses(tmp_path: Path) -> None:
    exp = tmp_path / "aa.toml"
    exp.write_text(AA)
    out = tmp_path / "AB"
    first = abgate("ab", str(exp), "-o", str(out))
    assert first.returncode == 3, first.stderr  # 2 items decide nothing
    ab_before = (out / "ab.json").read_bytes()
    comparison = out / "comparison.json"
    env, imported = no_engine_env(tmp_path)

    r = abgate("ab", "--resume", str(out), env=env)
    assert r.returncode == 3, r.stderr  # the recorded verdict's exit code
    assert f"A/B {out} is already complete; nothing to resume" in r.stderr
    assert "a2 vs a1: INCONCLUSIVE" in r.stdout and "report.html" in r.stdout
    assert (out / "ab.json").read_bytes() == ab_before

    comparison.write_text(comparison.read_text().replace('"ab_status"', '"ab_status_old"'))
    r = abgate("ab", "--resume", str(out), "--reanalyse", env=env)
    assert r.returncode == 3, r.stderr
    assert "--reanalyse: recomputing" in r.stderr and "no engine is loaded" in r.stderr
    assert json.loads(comparison.read_text())["ab_status"] == "complete"  # rewritten
    assert (out / "ab.json").read_bytes() == ab_before
    assert not imported.exists()
