"""A process that takes its title after it starts (vLLM's ``setproctitle``: a served
vLLM's EngineCore is first seen as ``python -c ...multiprocessing.spawn...``) is recorded
under that title, with its role, in the cleanup evidence; a title seen once is kept."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from abgate.engines.shared.server_cleanup import note_process, per_process

# sleeps, then re-executes itself under vLLM's title: same pid, same start time
LATE_TITLE = ("import os, sys, time; time.sleep(0.3); "
              "os.execv(sys.executable, ['VLLM::EngineCore', '-c', 'import time; time.sleep(30)'])")


def _wait_for_title(p: psutil.Process, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not (p.cmdline() or [""])[0].startswith("VLLM::"):  # (empty mid-exec)
        assert time.monotonic() < deadline, p.cmdline()
        time.sleep(0.05)


def test_a_title_taken_after_start_is_what_the_evidence_shows() -> None:
    proc = subprocess.Popen([sys.executable, "-c", LATE_TITLE])
    try:
        ps = psutil.Process(proc.pid)
        seen: dict[int, tuple[float, str]] = {}
        note_process(seen, ps)
        assert per_process(seen)[0]["role"] == "process"  # seen before its title
        _wait_for_title(ps)
        note_process(seen, ps)
        [entry] = per_process(seen)
        assert entry["role"] == "engine_core" and entry["cmd"].startswith("VLLM::EngineCore")
        note_process(seen, ps)  # seen again: still the title
        assert per_process(seen)[0]["role"] == "engine_core"
    finally:
        proc.kill()
        proc.wait()
    assert per_process(seen)[0]["exited"] is True


def test_a_plain_process_keeps_its_first_command() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ps = psutil.Process(proc.pid)
        seen = {proc.pid: (ps.create_time(), "the command first seen")}
        note_process(seen, ps)
        assert seen[proc.pid][1] == "the command first seen"
    finally:
        proc.kill()
        proc.wait()
