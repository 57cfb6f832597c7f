"""abgate writes only what it owns, one writer at a time (issue 26, items 1-3): the
per-directory lock, ``--force`` only on abgate's own directories, arm names that
cannot leave the A/B directory."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from abgate.ab.experiment import check_arm_name
from abgate.dirlock import LOCK_FILE, exclusive
from abgate.errors import UsageError
from abgate.runner.outdir import prepare_new_dir
from tests.conftest import HANG_S, engine_refused, error_lines, wait_until
from tests.support.fake import cli
from tests.support.fault_server import FaultServer

HOLD = ("import sys, time; from pathlib import Path; from abgate.dirlock import exclusive\n"
        "with exclusive(Path(sys.argv[1])):\n"
        "    Path(sys.argv[2]).write_text('held'); time.sleep(600)\n")


def _run_args(url: str, out: Path) -> list[str]:
    return ["run", "--engine", "openai", "--endpoint", url, "--suite", "synthetic",
            "--limit", "2", "--max-tokens", "4", "--request-timeout", "300", "-o", str(out)]


def test_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """While ``abgate run`` is writing DIR (its first request stalls), ``--resume DIR``
    and ``--force`` on DIR are refused in one line naming its pid and command, and
    nothing of the first run is touched."""
    out = tmp_path / "R"
    with FaultServer(default="stall_first") as fs:
        first = subprocess.Popen([sys.executable, "-m", "abgate", *_run_args(fs.url, out)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: len(fs.completions) >= 1, first, "the first request")
            before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()
                      and p.name != "run.log"}
            for args in (["run", "--resume", str(out)], [*_run_args(fs.url, out), "--force"]):
                r = cli(*args)  # in this process: the holder is the subprocess
                assert r.returncode == 2, r.stderr
                lines = error_lines(r.stderr)
                assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
                assert f"being written by pid {first.pid}" in lines[0], lines[0]
                assert "abgate" in lines[0] and str(out) in lines[0]
            after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()
                     and p.name != "run.log"}
            assert after == before
            assert json.loads((out / "run.json").read_text())["status"] == "running"
        finally:
            first.kill()
            first.communicate()


def test_second_ab_writer_is_refused(tmp_path: Path) -> None:
    """Two ``abgate ab`` on one directory: the second (a ``--resume``) is refused at
    once, instead of both failing after all the work."""
    out = tmp_path / "AB"
    with FaultServer(default="stall_first") as fs:
        exp = tmp_path / "exp.toml"
        exp.write_text(f"""baseline = "a"
[shared]
engine = "openai"
suite = "synthetic"
limit = 2
max_tokens = 4
engine_options = {{ endpoints = ["{fs.url}"], request_timeout = 300.0 }}
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
[arms.a]
[arms.b]
""")
        first = subprocess.Popen([sys.executable, "-m", "abgate", "ab", str(exp), "-o",
                                  str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
        try:
            wait_until(lambda: len(fs.completions) >= 1, first, "the first request")
            r = cli("ab", "--resume", str(out))  # in this process
            assert r.returncode == 2, r.stderr
            assert f"being written by pid {first.pid}" in r.stderr, r.stderr
            assert len(error_lines(r.stderr)) == 1
            assert json.loads((out / "ab.json").read_text())["status"] == "running"
        finally:
            first.kill()
            first.communicate()


def test_lock_is_released_when_the_holder_is_killed(tmp_path: Path) -> None:
    """The kernel drops the lock with its holder (SIGKILL included): no stale lock."""
    d, ready = tmp_path / "D", tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(d), str(ready)])
    try:
        wait_until(ready.exists, holder, "the lock")
        with pytest.raises(UsageError, match=f"being written by pid {holder.pid}"), \
                exclusive(d):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=HANG_S)
    with exclusive(d):  # free again
        assert (d / LOCK_FILE).exists()


def test_force_refuses_a_directory_abgate_did_not_write(tmp_path: Path) -> None:
    """A project directory with a file named run.json (not an abgate record), or an
    abgate run directory holding a user's file, is never cleared by --force."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('mine')\n")
    (project / "run.json").write_text('{"name": "my run config"}\n')
    with engine_refused() as imported:  # the CLI in this process
        r = cli("run", "--suite", "synthetic", "--limit", "1", "-o", str(project), "--force")
    assert r.returncode == 2 and "not a valid abgate record" in r.stderr, r.stderr
    assert len(error_lines(r.stderr)) == 1
    assert (project / "src" / "main.py").read_text() == "print('mine')\n"
    assert sorted(p.name for p in project.iterdir()) == ["run.json", "src"]
    assert not imported


def test_force_clears_abgate_records_but_not_a_users_file(tmp_path: Path) -> None:
    from abgate.runner.documents import new_record, write_record

    d = tmp_path / "R"
    d.mkdir()
    write_record(d / "run.json", new_record("run", config={}, spec={}, spec_digest="x"))
    (d / "samples.jsonl").write_text("")
    (d / "server-llama_cpp.log").write_text("log\n")
    (d / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="notes.txt was not written by abgate"):
        prepare_new_dir(d, force=True)
    assert (d / "notes.txt").read_text() == "mine" and (d / "samples.jsonl").exists()
    (d / "notes.txt").unlink()
    (d / "data").mkdir()
    with pytest.raises(UsageError, match="data was not written by abgate"):
        prepare_new_dir(d, force=True)
    (d / "data").rmdir()
    with exclusive(d):  # the lock file survives the clearing (it may be held)
        prepare_new_dir(d, force=True)
        assert [p.name for p in d.iterdir()] == [LOCK_FILE]


@pytest.mark.parametrize("name", ["", ".", "..", "../../escaped", "a/b", "-x", "x" * 65,
                                  "a b", "é"])
def test_unsafe_arm_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match="is not allowed"):
        check_arm_name("exp.toml", name)


@pytest.mark.parametrize("name", ["a", "f16", "q8_0", "kv-q8.fa", "B2", "x" * 64])
def test_safe_arm_names(name: str) -> None:
    assert check_arm_name("exp.toml", name) == name


def test_ab_with_an_escaping_arm_name_writes_nothing(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text('baseline = "base"\n[shared]\nsuite = "synthetic"\nlimit = 1\n'
                   '[arms.base]\n[arms."../../escaped"]\n')
    out = tmp_path / "deep" / "AB"
    with engine_refused() as imported:  # the CLI in this process
        r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert "arm name '../../escaped' is not allowed" in r.stderr
    assert len(error_lines(r.stderr)) == 1
    assert not (tmp_path / "deep").exists() and not (tmp_path / "escaped").exists()
    assert not imported


@pytest.mark.parametrize("argv", [["python", "-m", "a/../../b"], ["python3", "x/../y z.py"],
                                  ["/opt/../srv"], ["python", "-m", ".hidden"]])
def test_server_log_names_stay_in_the_run_directory(argv: list[str]) -> None:
    from abgate.engines.shared.server import server_name

    name = server_name(argv)
    assert name and "/" not in name and not name.startswith(".") and name != ".."
