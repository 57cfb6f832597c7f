"""A launched server that never becomes ready: its whole process tree is found and
stopped, a worker that left the process group through a short-lived intermediate
included, the evidence is in run.json, and it is never ``verified`` while a process
survives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from abgate.engines.shared import server as server
from abgate.errors import AbgateError
from tests.conftest import abgate, thread_flags
from tests.test_openai_engine import needs_server

# The leader starts an intermediate that starts a worker in a session of its own and
# exits at once: the worker is re-parented and outside the group. Then the leader
# never answers (or exits, or execs the server given after "--").
LAUNCHER = r'''
import os, subprocess, sys, time
args = sys.argv[1:]
rest = args[args.index("--") + 1:] if "--" in args else []
args = args[:args.index("--")] if "--" in args else args
opts = dict(zip(args[::2], args[1::2]))
worker = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)"
spawn = ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', %r, sys.argv[1]],"
         " start_new_session=True)" % worker)
subprocess.run([sys.executable, "-c", spawn, opts["--pid-file"]], check=True)
print("launcher: worker started, not ready", flush=True)
while not os.path.exists(opts["--pid-file"]):
    time.sleep(0.05)
if rest:
    os.execv(rest[0], rest)
if opts.get("--exit"):
    sys.exit(int(opts["--exit"]))
time.sleep(600)
'''


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Path]:
    """The launcher script; whatever it started and left running (a failing test's
    survivors, found by this test's directory in their command line) is killed after."""
    path = tmp_path / "launcher.py"
    path.write_text(LAUNCHER)
    yield path
    for p in psutil.process_iter():
        try:
            if str(tmp_path) in " ".join(p.cmdline()) and p.pid != os.getpid():
                p.kill()
        except psutil.Error:
            pass


def worker_pid(pid_file: Path) -> int:
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return int(pid_file.read_text())


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def command(launcher: Path, pid_file: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(launcher), "--port {port}", "--pid-file",
                     str(pid_file), *extra])


@pytest.mark.parametrize("exits", [False, True])
def test_detached_worker_of_a_failed_start_is_found_and_stopped(
        launcher: Path, tmp_path: Path, exits: bool) -> None:
    pid_file = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.pid"
    extra = ("--exit", "1") if exits else ()
    match = "exited with code 1" if exits else "not ready after 2 s"
    with pytest.raises(AbgateError, match=match) as info:
        server.launch(command(launcher, pid_file, *extra), model="", args={},
                      log_dir=tmp_path, ready_timeout=2, grace_s=1.0)
    pid = worker_pid(pid_file)
    ev = info.value.cleanup_evidence  # type: ignore[attr-defined]
    assert gone(pid), "the detached worker survived the failed start"
    assert ev["verified"] and ev["survivors"] == [] and not ev["ready"]
    # under the supervisor (a subreaper) a server that exits at once has its leftovers
    # ended by the supervisor before abgate's tracker looks: then only it was tracked
    assert ev["processes_tracked"] >= (1 if ev.get("supervised") else 2)
    assert "cleanup verified" in str(info.value)
    log = (tmp_path / "server-launcher.log").read_text()
    assert '"verified": true' in log and '"survivors": []' in log


def test_a_surviving_process_is_never_verified(launcher: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that outlives every signal (simulated: the signals are not sent, a fault
    no real server provokes on demand) is a survivor, and the stop is NOT verified."""
    pid_file = tmp_path / "worker.pid"
    monkeypatch.setattr(server.ProcessTracker, "kill_all", lambda self, sig: None)
    # With no signal sent nothing can exit, so the stop's waits for that (10 s after
    # SIGKILL, 5 s for the leader) are cut to 0.3 s each: the same evidence, 15 s sooner.
    wait_gone, popen_wait = server.ProcessTracker.wait_gone, subprocess.Popen.wait
    monkeypatch.setattr(server.ProcessTracker, "wait_gone",
                        lambda self, timeout: wait_gone(self, min(timeout, 0.3)))
    monkeypatch.setattr(subprocess.Popen, "wait", lambda self, timeout=None: popen_wait(
        self, None if timeout is None else min(timeout, 0.3)))
    with pytest.raises(AbgateError, match="cleanup NOT verified") as info:
        server.launch(command(launcher, pid_file), model="", args={}, log_dir=tmp_path,
                      ready_timeout=2, grace_s=0.2)
    ev = info.value.cleanup_evidence  # type: ignore[attr-defined]
    pid = worker_pid(pid_file)
    assert not ev["verified"] and pid in [s["pid"] for s in ev["survivors"]]
    assert not gone(pid)  # (the launcher fixture kills it and the leader)


@needs_server
@pytest.mark.server
@pytest.mark.engine
def test_failed_llama_cpp_server_start_is_recorded_in_run_json(launcher: Path,
                                                               tmp_path: Path) -> None:
    """llama_cpp.server with a missing model, started after a detached worker: the run
    fails, run.json holds the cleanup evidence, and the worker is gone."""
    pid_file = tmp_path / "worker.pid"
    missing = f"/nonexistent/abgate-{uuid.uuid4().hex[:8]}.gguf"
    launch = command(launcher, pid_file, "--", sys.executable, "-m", "llama_cpp.server",
                     "--model", missing, "--host", "{host}", "--port", "{port}")
    r = abgate("run", "--suite", "synthetic", "--limit", "1", "--engine", "openai",
               "--launch", launch, "--ready-timeout", "300", *thread_flags(),
               "-o", str(tmp_path / "R"))
    assert r.returncode == 1, r.stderr
    assert "before it was ready" in r.stderr and "cleanup verified" in r.stderr
    run = json.loads((tmp_path / "R" / "run.json").read_text())
    assert run["status"] == "failed"
    cleanup = run["cleanup"]
    assert cleanup is not None and cleanup["verified"] and not cleanup["ready"]
    assert cleanup["server"]["survivors"] == [] and cleanup["server"]["exited_before_stop"]
    assert gone(worker_pid(pid_file))
