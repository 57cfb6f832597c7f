"""Filesystem safety (issue 35, items 1, 4, 5): no write or delete through a symbolic
link, the writer lock covering the records nested in a locked directory, and one rule
for a torn last line of every JSON Lines file abgate appends to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abgate.ab.decision import DECISIONS_FILE, read_decisions
from abgate.dirlock import LOCK_FILE, exclusive
from abgate.errors import UsageError
from abgate.jsonl_append import append_line, repair_torn, torn_start
from abgate.ledger.store import Ledger
from abgate.provenance.manifest import write_manifest
from abgate.records.samples import Sample
from abgate.report import write_text_atomic
from abgate.runner.documents import write_json_atomic
from abgate.runner.records import SampleWriter, read_samples
from abgate.safefs import LogFile, truncate
from tests.conftest import error_lines, wait_until
from tests.support.fake import RUN_FLAGS, cli, experiment, fake_run

HOLD = ("import sys, time; from pathlib import Path; from abgate.dirlock import exclusive\n"
        "with exclusive(Path(sys.argv[1])):\n"
        "    Path(sys.argv[2]).write_text('held'); time.sleep(600)\n")
VICTIM = "a user's file, outside abgate's directory\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text(VICTIM)
    return path


def _one_line(r: object, *needles: str) -> str:
    rc, stderr = getattr(r, "returncode"), getattr(r, "stderr")  # noqa: B009
    assert rc == 2, stderr
    lines = error_lines(stderr)
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return str(lines[0])


def _hold(directory: Path, flag: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), str(flag)],
                            text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(flag.exists, proc, "the holder's lock")
    return proc


# -- 1. never through a link ---------------------------------------------------------------


def test_a_symlinked_lock_is_refused_and_the_directory_is_not_empty(tmp_path: Path,
                                                                     victim: Path) -> None:
    out = tmp_path / "R"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    _one_line(fake_run(out), str(out / LOCK_FILE), "symbolic link")
    _one_line(fake_run(out, "--force"), LOCK_FILE)  # not abgate's: foreign
    assert victim.read_text() == VICTIM
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    with pytest.raises(UsageError, match="symbolic link"), exclusive(out):
        pass
    assert victim.read_text() == VICTIM


@pytest.mark.parametrize("name", ["samples.jsonl", "run.log", "summary.json", "run.json"])
def test_resume_refuses_a_symlinked_record_file(tmp_path: Path, victim: Path,
                                                name: str) -> None:
    out = tmp_path / "R"
    assert fake_run(out, "--engine-arg", "crash_after=3").returncode == 130
    victim.write_bytes((out / name).read_bytes())
    copy = victim.read_bytes()
    (out / name).unlink()
    (out / name).symlink_to(victim)
    before = {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()}
    _one_line(cli("run", "--resume", str(out)), str(out / name), "symbolic link")
    assert victim.read_bytes() == copy and (out / name).is_symlink()
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()} == before


def test_ab_resume_refuses_an_arms_symlinked_samples(tmp_path: Path, victim: Path) -> None:
    exp = experiment(tmp_path / "exp.toml", "crash_after = 3", limit=6, agreement=False)
    out = tmp_path / "AB"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 130, r.stderr  # arm b's engine crashed: the A/B is resumable
    samples = out / "arms" / "b" / "samples.jsonl"
    victim.write_bytes(samples.read_bytes())
    copy = victim.read_bytes()
    samples.unlink()
    samples.symlink_to(victim)
    _one_line(cli("ab", "--resume", str(out)), str(samples), "symbolic link")
    assert victim.read_bytes() == copy and samples.is_symlink()


def test_every_writer_refuses_a_link(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(victim)
    writers = [lambda: write_json_atomic(link, {"schema_version": 1}),
               lambda: write_text_atomic(link, "report"),
               lambda: SampleWriter(link).append(Sample(key="k")),
               lambda: append_line(link, b"{}\n"),
               lambda: LogFile(link).close(),
               lambda: truncate(link, 0),
               lambda: repair_torn(link)]
    for write in writers:
        with pytest.raises(UsageError, match=f"{link} is a symbolic link"):
            write()
    assert victim.read_text() == VICTIM and link.is_symlink()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        append_line(fifo, b"{}\n")  # a FIFO nobody reads: refused, never a hang


def test_ledger_and_manifest_refuse_a_link(tmp_path: Path, victim: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    ledger.symlink_to(victim)
    with pytest.raises(UsageError, match="ledger.sqlite is a symbolic link"):
        Ledger(ledger)
    ledger.unlink()
    (tmp_path / "ledger.sqlite-journal").symlink_to(victim)
    with pytest.raises(UsageError, match="ledger.sqlite-journal is a symbolic link"):
        Ledger(ledger)
    manifest = tmp_path / "manifest.json"
    manifest.symlink_to(victim)
    with pytest.raises(UsageError, match="manifest.json is a symbolic link"):
        write_manifest({"schema_version": 1}, manifest)
    assert victim.read_text() == VICTIM and manifest.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere", "ledger.sqlite-journal", "manifest.json"]  # no temporary file left


def test_atomic_write_refuses_a_symlinked_temporary_file(tmp_path: Path,
                                                         victim: Path) -> None:
    (tmp_path / "summary.json.tmp").symlink_to(victim)
    with pytest.raises(UsageError, match="summary.json.tmp is a symbolic link"):
        write_json_atomic(tmp_path / "summary.json", {"schema_version": 1})
    assert victim.read_text() == VICTIM and not (tmp_path / "summary.json").exists()


# -- 2. the lock covers the records nested in a locked directory ----------------------------


def test_an_arm_of_a_locked_ab_is_refused_to_other_writers(tmp_path: Path) -> None:
    """While another process writes AB (as ``abgate ab`` does), its arm is refused to
    ``run --force``, ``run --resume`` and a new ``bench -o`` under it, naming AB and
    the holder's pid, and nothing in the arm changes."""
    ab = tmp_path / "AB"
    arm = ab / "arms" / "b"
    assert fake_run(arm, "--engine-arg", "crash_after=3").returncode == 130
    before = {p.name: p.read_bytes() for p in arm.iterdir() if p.name != LOCK_FILE}
    holder = _hold(ab, tmp_path / "held.flag")
    try:
        refusals = [fake_run(arm, "--force"), cli("run", "--resume", str(arm)),
                    cli("bench", "--engine", "fake", "--input-len", "16", "--output-len",
                        "4", "--repeats", "1", "-o", str(ab / "arms" / "c"))]
        for r in refusals:
            _one_line(r, f"inside {ab}", f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.communicate()
    assert not (ab / "arms" / "c").exists()
    assert {p.name: p.read_bytes() for p in arm.iterdir() if p.name != LOCK_FILE} == before


def test_a_written_arm_is_not_deleted_while_its_ab_is_locked(tmp_path: Path) -> None:
    ab = tmp_path / "AB"
    arm = ab / "arms" / "b"
    assert fake_run(arm).returncode == 0
    samples = (arm / "samples.jsonl").read_bytes()
    with exclusive(ab):  # this process writes AB; a second one must not touch its arm
        code = ("import sys; from pathlib import Path; from abgate.cli import main; "
                "sys.argv = ['abgate', *sys.argv[1:]]; main()")
        r = subprocess.run([sys.executable, "-c", code, "run", *RUN_FLAGS, "--limit", "6",
                            "--seeds", "0,1", "-o", str(arm), "--force"],
                           capture_output=True, text=True, timeout=300)
    _one_line(r, f"inside {ab}", f"pid {os.getpid()}")
    assert (arm / "samples.jsonl").read_bytes() == samples


@pytest.mark.parametrize("parent_locked_before", [False, True])
def test_a_parent_of_a_directory_another_writer_holds_is_refused(
        tmp_path: Path, parent_locked_before: bool) -> None:
    parent, inner = tmp_path / "P", tmp_path / "P" / "arms" / "b"
    if parent_locked_before:  # P has a lock file: the inner writer shares it
        with exclusive(parent):
            pass
    proc = _hold(inner, tmp_path / "held.flag")
    try:
        with pytest.raises(UsageError) as exc, exclusive(parent):
            pass
        assert str(inner) in str(exc.value) and f"pid {proc.pid}" in str(exc.value)
    finally:
        proc.kill()
        proc.communicate()
    with exclusive(parent):  # the inner writer gone: free again
        pass


# -- 3. one rule for a torn last line ------------------------------------------------------


def test_torn_start_rule() -> None:
    assert torn_start(b"") is None and torn_start(b'{"a": 1}\n') is None
    assert torn_start(b'{"a": 1}\n\n \n') is None  # blank lines are no tear
    assert torn_start(b'{"a": 1}\n{"b": 2') == 9  # cut off mid-write
    assert torn_start(b'{"a": 1}\n{"b": 2}') == 9  # its newline never written
    assert torn_start(b'{"a": 1}\n{"b": \n\n') == 9  # a cut-off line then blanks
    assert torn_start(b'{"a": 1}\nxx\n{"b": 2}\n') is None  # corruption: the reader's


def test_sample_writer_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "agreement.jsonl"
    path.write_bytes(b'{"key": "a"}\n{"key": "b", "tok')
    with SampleWriter(path) as w:
        w.append(Sample(key="c"))
    assert [s["key"] for s in read_samples(path)] == ["a", "c"]
    assert (tmp_path / "agreement.jsonl.torn").read_bytes() == b'{"key": "b", "tok\n'


def test_a_resumed_run_keeps_the_torn_bytes_and_force_clears_them(tmp_path: Path) -> None:
    out = tmp_path / "R"
    assert fake_run(out, "--engine-arg", "crash_after=3").returncode == 130
    with (out / "samples.jsonl").open("ab") as f:
        f.write(b'{"key": "torn-')
    codes = [cli("run", "--resume", str(out)).returncode for _ in range(3)]
    assert codes == [130, 130, 0]  # the fake crashes after 3 requests in each process
    assert (out / "samples.jsonl.torn").read_bytes() == b'{"key": "torn-\n'
    assert len(read_samples(out / "samples.jsonl")) == 12
    assert fake_run(out, "--force").returncode == 0  # abgate's own: cleared
    assert not (out / "samples.jsonl.torn").exists()


def test_decide_after_a_torn_line_is_recorded_and_reported(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "exp.toml", limit=4, agreement=False)
    out = tmp_path / "AB"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 3 and (out / "comparison.json").exists(), r.stderr
    torn = b'{"decision": "revert", "wh'  # a decide killed mid-write
    (out / DECISIONS_FILE).write_bytes(torn)
    r = cli("decide", str(out), "--decision", "keep-default-on", "--why", "small change")
    assert r.returncode == 0 and "recorded" in r.stdout, r.stderr
    decisions = read_decisions(out)
    assert [d.decision for d in decisions] == ["keep-default-on"]
    assert "Engineer's decision: keep-default-on" in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["decisions"][0]["why"] \
        == "small change"
    assert (out / (DECISIONS_FILE + ".torn")).read_bytes() == torn + b"\n"
    r = cli("decide", str(out), "--decision", "revert", "--why", "second thoughts")
    assert r.returncode == 0 and [d.decision for d in read_decisions(out)] == [
        "keep-default-on", "revert"]
