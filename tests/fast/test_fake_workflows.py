"""Workflow logic on the in-process fake engine (the fast tier): runs and their resume,
A/B schedules, verdicts and resume, reports and the ledger, through the real CLI in
this process. Real engines are the engine tier's (tests marked ``engine``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import abgate
from abgate.records.documents import AbRecord
from abgate.runner.documents import read_record
from tests.conftest import default_sigint
from tests.support.fake import ACCEPT_ARGS, REJECT_ARGS, RUN_FLAGS, cli, experiment, fake_run


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _keys(path: Path) -> list[object]:
    return [s["key"] for s in _lines(path) if not s.get("warmup")]


# -- abgate run ---------------------------------------------------------------------------


def test_run_records_every_sample_and_a_summary_from_them(tmp_path: Path) -> None:
    r = fake_run(tmp_path / "r", "--engine-arg", "accuracy=0.5")
    assert r.returncode == 0, r.stderr
    doc = read_record(tmp_path / "r" / "run.json", "run")
    assert doc.status == "complete" and doc.engine is not None and doc.engine.name == "fake"
    samples = _lines(tmp_path / "r" / "samples.jsonl")
    assert len(samples) == 12 and len({s["key"] for s in samples}) == 12
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    correct = sum(bool(s["correct"]) for s in samples)
    assert 0 < correct < 12  # the knob answers some prompts wrong, deterministically
    assert summary["quality"]["accuracy"] == pytest.approx(correct / 12)


def test_interrupted_run_resumes_without_redoing_or_duplicating(tmp_path: Path) -> None:
    out = tmp_path / "r"
    first = fake_run(out, "--engine-arg", "crash_after=5")
    assert first.returncode == 130, first.stderr
    assert read_record(out / "run.json", "run").status == "interrupted"
    assert len(_keys(out / "samples.jsonl")) == 5
    for _ in range(3):  # each process of the fake crashes after 5 more requests
        again = cli("run", "--resume", str(out))
        if again.returncode == 0:
            break
        assert again.returncode == 130, again.stderr
    keys = _keys(out / "samples.jsonl")
    assert read_record(out / "run.json", "run").status == "complete"
    assert len(keys) == len(set(keys)) == 12
    straight = fake_run(tmp_path / "s")
    assert straight.returncode == 0
    texts = {s["key"]: s["output"]["text"] for s in _lines(out / "samples.jsonl")}  # type: ignore[index]
    assert texts == {s["key"]: s["output"]["text"]  # type: ignore[index]
                     for s in _lines(tmp_path / "s" / "samples.jsonl")}


def test_error_samples_are_recorded_as_errors_not_answers(tmp_path: Path) -> None:
    r = fake_run(tmp_path / "r", "--engine-arg", "error_rate=0.4")
    samples = _lines(tmp_path / "r" / "samples.jsonl")
    errors = [s for s in samples if s["finish_reason"] == "error"]
    assert 0 < len(errors) < len(samples), r.stderr
    assert all(s["correct"] is not True and s["error"] for s in errors)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["quality"]["n_error"] == len(errors)


def test_killed_run_resumes(tmp_path: Path) -> None:
    """SIGKILL of abgate itself (the fake kills its own process after 4 requests): the
    samples already appended survive, and --resume finishes the run."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "abgate", "run", *RUN_FLAGS, "--limit", "4", "--seeds", "0,1",
           "-o", str(out), "--engine-arg", "crash_after=4", "--engine-arg", "crash=kill"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert len(_keys(out / "samples.jsonl")) == 4
    assert read_record(out / "run.json", "run").status == "running"  # killed: never finalised
    # the resumed process crashes after 4 more requests too: exactly the 4 left
    done = subprocess.run([sys.executable, "-m", "abgate", "run", "--resume", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    keys = _keys(out / "samples.jsonl")
    assert len(keys) == len(set(keys)) == 8, done.stderr
    run = read_record(out / "run.json", "run")
    assert run.status == "complete" and len(run.resumes) == 1


def test_one_ctrl_c_stops_after_the_request_in_flight_and_resumes(tmp_path: Path) -> None:
    """One SIGINT while request 2 runs (it sleeps 1 s for real): that request is
    finished and recorded, the run ends ``interrupted`` with exit 130, and --resume
    completes it with each sample once. (Was the engine tier's
    test_run_cli::test_sigint_marks_interrupted_and_resumes on llama.cpp.)"""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "abgate", "run", *RUN_FLAGS, "--limit", "4", "--seeds", "0",
           "-o", str(out), "--engine-arg", "hang_at=2", "--engine-arg", "hang_s=1.0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        _wait(lambda: (out / "run.log").exists()
              and "request 2 hangs" in (out / "run.log").read_text(), proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 130
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert read_record(out / "run.json", "run").status == "interrupted"
    assert len(_keys(out / "samples.jsonl")) == 2  # the request in flight was finished
    done = subprocess.run([sys.executable, "-m", "abgate", "run", "--resume", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    keys = _keys(out / "samples.jsonl")
    assert len(keys) == len(set(keys)) == 4
    assert read_record(out / "run.json", "run").status == "complete"


def test_ctrl_c_during_a_hanging_request_interrupts(tmp_path: Path) -> None:
    """The first Ctrl-C is noted (the run would stop after the request in flight); the
    second stops the hanging request at once: exit 130, the run resumable."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "abgate", "run", *RUN_FLAGS, "--limit", "3", "--seeds", "0",
           "-o", str(out), "--engine-arg", "hang_at=2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        # The first signal only once request 2 hangs: before it, between samples, the first
        # signal alone ends the run (correctly) and the second would meet an exiting process.
        _wait(lambda: (out / "run.log").exists()
              and "request 2 hangs" in (out / "run.log").read_text(), proc)
        assert len(_keys(out / "samples.jsonl")) == 1
        proc.send_signal(signal.SIGINT)
        _wait(lambda: "stopping after the request in flight" in (out / "run.log").read_text(),
              proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 130
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert read_record(out / "run.json", "run").status == "interrupted"
    assert len(_keys(out / "samples.jsonl")) == 1


def _wait(done: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300  # a hang guard only
    while not done():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


# -- abgate ab ----------------------------------------------------------------------------


@pytest.mark.parametrize(("cand", "decision", "code"),
                         [(ACCEPT_ARGS, "ACCEPT", 0), (REJECT_ARGS, "REJECT", 1)])
def test_ab_verdict_follows_the_numeric_change(tmp_path: Path, cand: str, decision: str,
                                               code: int) -> None:
    r = cli("ab", str(experiment(tmp_path / "e.toml", cand)), "-o", str(tmp_path / "ab"))
    assert r.returncode == code, r.stderr + r.stdout
    comparison = json.loads((tmp_path / "ab" / "comparison.json").read_text())
    assert comparison["decision"] == decision
    assert read_record(tmp_path / "ab" / "ab.json", "ab").status == "complete"
    report = (tmp_path / "ab" / "report.md").read_text()
    assert decision in report and "distribution agreement" in report
    agreement = _lines(tmp_path / "ab" / "arms" / "b" / "agreement.jsonl")
    assert len(agreement) == 30


def test_ab_a_a_is_exact(tmp_path: Path) -> None:
    r = cli("ab", str(experiment(tmp_path / "e.toml", "")), "-o", str(tmp_path / "ab"))
    assert r.returncode == 3, r.stderr + r.stdout  # identical speed is no speedup
    assert "shows neither the required" in r.stdout
    rows = _lines(tmp_path / "ab" / "arms" / "b" / "agreement.jsonl")
    assert rows and all(kl == 0.0 for row in rows for kl in row["kl"]), rows[0]  # type: ignore[attr-defined]
    a = {s["key"]: s["output"] for s in _lines(tmp_path / "ab" / "arms" / "a" / "samples.jsonl")}
    b = {s["key"]: s["output"] for s in _lines(tmp_path / "ab" / "arms" / "b" / "samples.jsonl")}
    assert a == b


def test_ab_interleaves_and_resumes_to_the_same_samples(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "perturb = 0.05, crash_after = 7", limit=10,
                     agreement=False)
    out = tmp_path / "ab"
    first = cli("ab", str(exp), "-o", str(out))
    assert first.returncode == 130, first.stderr
    assert read_record(out / "ab.json", "ab").status == "interrupted"
    for _ in range(4):
        again = cli("ab", "--resume", str(out))
        if again.returncode != 130:
            break
    assert again.returncode in (0, 1, 3), again.stderr
    doc = read_record(out / "ab.json", "ab", model=AbRecord)
    assert doc.status == "complete" and doc.schedule.mode == "interleave"
    assert len(doc.resumes) >= 1
    for arm in ("a", "b"):
        keys = _keys(out / "arms" / arm / "samples.jsonl")
        assert len(keys) == len(set(keys)) == 10


def test_ab_resume_with_an_edited_policy_file_is_refused(tmp_path: Path) -> None:
    """The policy's bytes are an input of the A/B (its path is in the experiment): a
    resume after the file was edited is refused (exit 2, before any engine loads);
    with the file as it was, it finishes."""
    exp = experiment(tmp_path / "e.toml", "perturb = 0.05, crash_after = 5", limit=6,
                     agreement=False)
    policy = tmp_path / "policy.toml"
    text = (Path(abgate.__file__).parent / "policies" / "fast-path.toml").read_text()
    policy.write_text(text)
    out = tmp_path / "ab"
    assert cli("ab", str(exp), "-o", str(out), "--policy", str(policy)).returncode == 130
    inputs = read_record(out / "ab.json", "ab", model=AbRecord).inputs
    assert inputs is not None and len(inputs["policy"] or "") == 64
    policy.write_text(text + "\n# edited\n")
    edited = cli("ab", "--resume", str(out))
    assert edited.returncode == 2 and "the --policy differs" in edited.stderr, edited.stderr
    policy.write_text(text)
    for _ in range(4):
        again = cli("ab", "--resume", str(out))
        if again.returncode != 130:
            break
    assert again.returncode in (0, 1, 3), again.stderr


def test_report_is_rebuilt_from_the_records(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    assert cli("ab", str(experiment(tmp_path / "e.toml", ACCEPT_ARGS)),
               "-o", str(out)).returncode == 0
    (out / "report.md").unlink()
    r = cli("report", str(out), "-o", str(tmp_path / "again.md"))
    assert r.returncode == 0, r.stderr
    assert "ACCEPT" in (tmp_path / "again.md").read_text()
    html = cli("report", str(out), "--format", "html")
    assert html.returncode == 0 and "<html" in html.stdout.lower()


def test_ledger_indexes_runs_and_abs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("ABGATE_LEDGER", str(ledger))
    assert fake_run(tmp_path / "r", limit=2).returncode == 0
    assert cli("ab", str(experiment(tmp_path / "e.toml", ACCEPT_ARGS)),
               "-o", str(tmp_path / "ab")).returncode == 0
    ls = cli("ledger", "ls")
    assert ls.returncode == 0, ls.stderr
    assert "2 records" in ls.stdout and "ACCEPT" in ls.stdout, ls.stdout
    assert cli("ledger", "check").returncode == 0
    shutil.rmtree(tmp_path / "r")  # the test's own run directory, gone
    gone = cli("ledger", "check")
    assert gone.returncode == 1 and "MISSING" in gone.stdout, gone.stdout
