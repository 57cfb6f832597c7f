"""Finishing that survives a signal: real SIGINT/SIGTERM/SIGKILL sent to the abgate
process at named moments (``ABGATE_TEST_PAUSE_AT``: imports, records, reports, decided),
then the records, reports and ledger entry checked, and ``--resume`` (or any later
command) seen to complete what was cut short and to say so in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from abgate.ledger.store import opened
from abgate.report import render
from tests.conftest import error_lines
from tests.support.fake import ACCEPT_ARGS, RUN_FLAGS, cli, experiment

REPORTS = {"md": "report.md", "json": "report.json", "html": "report.html"}


def _start(tmp_path: Path, pause: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "ABGATE_TEST_PAUSE_AT": pause,
           "ABGATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    return subprocess.Popen([sys.executable, "-m", "abgate", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _signal_at(proc: subprocess.Popen[str], point: str, signum: int) -> tuple[int, str]:
    """Wait until ``proc`` pauses at ``point``, send ``signum``; its exit code and
    stderr (the lines before the pause included)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.strip() == f"abgate-test: paused at {point}":
            break
    else:
        proc.wait()
        pytest.fail(f"never paused at {point} (exit {proc.returncode}): {''.join(seen)}")
    proc.send_signal(signum)
    _, rest = proc.communicate(timeout=120)
    said = [line for line in "".join(seen[:-1]).splitlines() + rest.splitlines()
            if not line.startswith("warning: Undeclared")]
    return proc.returncode, "\n".join(said)


def _ledger(tmp_path: Path, kind: str) -> list[str]:
    if not (tmp_path / "ledger.sqlite").exists():
        return []
    with opened(tmp_path / "ledger.sqlite") as db:
        return [str(r.path) for r in db.records(kind)]


def _ab(tmp_path: Path) -> tuple[Path, Path]:
    return experiment(tmp_path / "e.toml", ACCEPT_ARGS, limit=4, agreement=False), \
        tmp_path / "ab"


def _reports_current(out: Path) -> None:
    for fmt, name in REPORTS.items():
        assert (out / name).read_text(encoding="utf-8") == render(out, fmt), name


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 130)])
def test_a_signal_during_the_imports_is_one_line(tmp_path: Path, signum: int,
                                                 code: int) -> None:
    proc = _start(tmp_path, "imports", "run", *RUN_FLAGS, "--limit", "2",
                  "-o", str(tmp_path / "r"))
    rc, said = _signal_at(proc, "imports", signum)
    assert rc == code
    assert error_lines(said) == [f"abgate: interrupted ({signal.Signals(signum).name})"]
    assert not (tmp_path / "r").exists()


def test_sigterm_while_the_reports_are_written_finishes_them_first(tmp_path: Path,
                                                                   monkeypatch:
                                                                   pytest.MonkeyPatch
                                                                   ) -> None:
    """The reports, then the ledger entry, are written whole; exit 130 in one line that
    says nothing is left; a --resume then has nothing to do."""
    path, out = _ab(tmp_path)
    rc, said = _signal_at(_start(tmp_path, "reports", "ab", str(path), "-o", str(out)),
                          "reports", signal.SIGTERM)
    assert rc == 130, said
    assert "abgate: interrupted (SIGTERM) while finishing; the finishing was completed " \
           "first, nothing is left to resume" in error_lines(said)
    assert "Traceback" not in said
    _reports_current(out)
    assert _ledger(tmp_path, "ab") == [str(out.resolve())]
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    again = cli("ab", "--resume", str(out))
    assert f"A/B {out} is already complete; nothing to resume" in again.stderr


def test_a_kill_while_the_reports_are_written_is_completed_by_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, out = _ab(tmp_path)
    rc, _ = _signal_at(_start(tmp_path, "reports", "ab", str(path), "-o", str(out)),
                       "reports", signal.SIGKILL)
    assert rc == -signal.SIGKILL
    assert (out / "report.md").exists() and not (out / "report.html").exists()
    assert _ledger(tmp_path, "ab") == []
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    done = cli("ab", "--resume", str(out))
    assert done.returncode == 3, done.stderr  # 4 items: INCONCLUSIVE, as recorded
    assert f"A/B {out} was complete, but its finishing had been cut short; completed: " \
           "report.json, report.html, ledger entry." in done.stderr
    _reports_current(out)
    assert _ledger(tmp_path, "ab") == [str(out.resolve())]


def test_a_signal_while_an_abs_final_records_are_written(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """ab.json ends complete, whole; the verdict and reports are left to --resume, which
    the one line names; the resume writes them and the ledger entry."""
    path, out = _ab(tmp_path)
    rc, said = _signal_at(_start(tmp_path, "records", "ab", str(path), "-o", str(out)),
                          "records", signal.SIGINT)
    assert rc == 130, said
    assert f"abgate: interrupted (SIGINT) before {out} was finished; --resume {out} " \
           "completes it" in error_lines(said)
    assert json.loads((out / "ab.json").read_text())["status"] == "complete"
    assert not (out / "comparison.json").exists() and not (out / "report.md").exists()
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    done = cli("ab", "--resume", str(out))
    assert done.returncode == 3, done.stderr
    assert "completed: comparison.json, report.md, report.json, report.html, ledger entry" \
        in done.stderr
    assert json.loads((out / "comparison.json").read_text())["ab_status"] == "complete"
    _reports_current(out)


def test_a_signal_while_a_runs_final_records_are_written(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    out = tmp_path / "r"
    rc, said = _signal_at(_start(tmp_path, "records", "run", *RUN_FLAGS, "--limit", "2",
                                 "-o", str(out)), "records", signal.SIGTERM)
    assert rc == 130, said
    assert f"abgate: interrupted (SIGTERM) before {out} was finished; --resume {out} " \
           "completes it" in error_lines(said)
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
    assert _ledger(tmp_path, "run") == []
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    done = cli("run", "--resume", str(out))
    assert done.returncode == 0, done.stderr
    assert f"run {out} was complete, but its finishing had been cut short; completed: " \
           "ledger entry" in done.stderr
    assert _ledger(tmp_path, "run") == [str(out.resolve())]
    again = cli("run", "--resume", str(out))
    assert f"run {out} is already complete (2 samples); nothing to resume" in again.stderr


def _decision_in(out: Path) -> tuple[bool, bool]:
    return ("keep-default-on" in (out / "report.md").read_text(),
            "keep-default-on" in (out / "report.html").read_text())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_after_decide_appended_its_line(tmp_path: Path, signum: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM: both reports are rendered from the new decision before exit 130. SIGKILL:
    neither has it, and the next command (here ``abgate report``) renders both."""
    path, out = _ab(tmp_path)
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    assert cli("ab", str(path), "-o", str(out)).returncode == 3
    rc, said = _signal_at(_start(tmp_path, "decided", "decide", str(out), "--decision",
                                 "keep-default-on", "--why", "fast enough"), "decided", signum)
    assert len((out / "decisions.jsonl").read_text().splitlines()) == 1
    if signum == signal.SIGTERM:
        assert rc == 130 and "nothing is left to resume" in said, said
        assert _decision_in(out) == (True, True)
    else:
        assert _decision_in(out) == (False, False)
        assert cli("report", str(out)).returncode == 0
        assert _decision_in(out) == (True, True)
    _reports_current(out)


def test_resume_rerenders_reports_older_than_a_decision(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A decision recorded without its reports (a kill before they were written) is
    shown in both by the next ``ab --resume``, which names what it re-rendered."""
    from abgate.ab.decision import record_decision

    path, out = _ab(tmp_path)
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    assert cli("ab", str(path), "-o", str(out)).returncode == 3
    record_decision(out, "revert", "too slow")
    assert "revert" not in (out / "report.md").read_text()
    done = cli("ab", "--resume", str(out))
    assert "completed: report.md, report.json, report.html, ledger entry" in done.stderr
    assert "revert" in (out / "report.md").read_text()
    assert "revert" in (out / "report.html").read_text()


def test_resume_of_a_complete_run_checks_its_samples(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABGATE_LEDGER", "off")
    out = tmp_path / "r"
    assert cli("run", *RUN_FLAGS, "--limit", "3", "-o", str(out)).returncode == 0
    samples = out / "samples.jsonl"
    good = samples.read_text().splitlines(keepends=True)
    for n, damaged in ((3, "{not json\n"), (2, good[0])):
        lines = list(good)
        lines[n - 1] = damaged
        samples.write_text("".join(lines))
        bad = cli("run", "--resume", str(out))
        assert bad.returncode == 2, bad.stderr
        (line,) = error_lines(bad.stderr)
        assert line.startswith(f"abgate: error: {samples}:{n}: "), line
    samples.write_text("".join(good[:2]))
    bad = cli("run", "--resume", str(out))
    assert bad.returncode == 2 and "1 of its 3 samples are missing" in bad.stderr


def test_resume_completes_what_a_kill_left_without_any_hook(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The states a kill during finishing leaves, made by hand: a complete A/B without
    two of its reports and without a ledger entry, a complete run without its ledger
    entry; ``--resume`` completes them and names what it wrote."""
    path, out = _ab(tmp_path)
    run = tmp_path / "r"
    monkeypatch.setenv("ABGATE_LEDGER", "off")
    assert cli("ab", str(path), "-o", str(out)).returncode == 3
    assert cli("run", *RUN_FLAGS, "--limit", "2", "-o", str(run)).returncode == 0
    (out / "report.json").unlink()
    (out / "report.html").write_text("<html>torn")
    monkeypatch.setenv("ABGATE_LEDGER", str(tmp_path / "ledger.sqlite"))
    done = cli("ab", "--resume", str(out))
    assert done.returncode == 3
    assert "completed: report.json, report.html, ledger entry." in done.stderr
    _reports_current(out)
    done = cli("run", "--resume", str(run))
    assert done.returncode == 0 and "completed: ledger entry" in done.stderr
    assert _ledger(tmp_path, "ab") == [str(out.resolve())]
    assert _ledger(tmp_path, "run") == [str(run.resolve())]


def test_a_signal_while_finishing_is_deferred_and_a_second_stops_at_once() -> None:
    from abgate import signals

    # install() keeps a SIGINT that was ignored when the process started ignored (a
    # background job, nohup): pytest itself may have been started so (seen: `cmd &`).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signals.install()
    try:
        with pytest.raises(signals.Stopped) as first, signals.deferred():
            signal.raise_signal(signal.SIGTERM)
            wrote = True  # reached: the first signal was only noted
        assert wrote and first.value.done and first.value.signum == signal.SIGTERM
        with pytest.raises(signals.Stopped) as second, signals.deferred():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            pytest.fail("a second signal while finishing must stop at once")
        assert not second.value.done and second.value.signum == signal.SIGINT
    finally:
        signals.restore(previous)
        signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_early_in_the_start_up_is_one_line_without_any_hook(tmp_path: Path) -> None:
    """No hook: SIGINT 0.2 s after the start (the interpreter is importing typer,
    pydantic, numpy): one line and 130, not a KeyboardInterrupt traceback."""
    env = {**os.environ, "ABGATE_LEDGER": "off"}
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "--help"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        proc.wait(timeout=0.2)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("abgate --help ended before the signal (a fast host)")
    assert proc.returncode == 130 and err.splitlines() == ["abgate: interrupted (SIGINT)"], err


def test_resume_of_a_complete_ab_checks_its_samples(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path, out = _ab(tmp_path)
    monkeypatch.setenv("ABGATE_LEDGER", "off")
    assert cli("ab", str(path), "-o", str(out)).returncode == 3
    samples = out / "arms" / "b" / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[:-1]) + "{damaged\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = cli("ab", "--resume", str(out))
    assert bad.returncode == 2, bad.stderr
    (line,) = [x for x in error_lines(bad.stderr) if not x.startswith("warning:")]
    assert line.startswith(f"abgate: error: {samples}:{len(lines)}: corrupt sample line")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
