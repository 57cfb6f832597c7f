"""An in-process engine in another interpreter (``--python``, ``engine_options.python``,
abgate/engines/hosted.py) on the fake engine: the same samples as in abgate's process,
the host's pid as the engine's process, the host gone after and when abgate is
SIGKILLed, errors and bad input in one line. The real llama.cpp library in a revision's
venv: tests/test_revision_inprocess.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from abgate.engines import hosted
from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.errors import AbgateError, UsageError
from tests.conftest import default_sigint, read_lines
from tests.support.fake import fake_run


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_a_hosted_run_records_the_same_samples_and_the_hosts_process(tmp_path: Path) -> None:
    here = fake_run(tmp_path / "here", limit=3)
    there = fake_run(tmp_path / "there", "--python", sys.executable, limit=3)
    assert here.returncode == 0 and there.returncode == 0, there.stderr
    texts = [[s["output"]["text"] for s in read_lines(tmp_path / d / "samples.jsonl")]  # type: ignore[index]
             for d in ("here", "there")]
    assert texts[0] == texts[1] and len(texts[0]) == 6
    run = json.loads((tmp_path / "there" / "run.json").read_text())
    pids = run["engine_processes"]
    assert pids and os.getpid() not in pids  # the host, not this process
    assert run["spec"]["engine_options"] == {"python": sys.executable}
    evidence = run["cleanup"]
    assert evidence["verified"] is True and evidence["hosted"]["survivors"] == []
    assert evidence["hosted"]["pid"] == pids[0] and _gone(pids[0], 1.0)


def test_generate_streams_each_result_and_errors_cross_as_themselves() -> None:
    engine = hosted.start(sys.executable, "fake", "fake", {}, None, None)
    try:
        seen: list[str] = []
        reqs = [GenerationRequest(f"r{i}", SamplingParams(max_tokens=8),
                                  prompt=f"What is {i} + 1?") for i in range(3)]
        results = engine.generate(reqs, on_result=lambda r: seen.append(r.request_id))
        assert [r.request_id for r in results] == seen == ["r0", "r1", "r2"]
        assert engine.tokenize("ab") == [97, 98] and engine.describe().name == "fake"
        with pytest.raises(AbgateError, match="unknown request 'nope'"):
            engine.call("nope")
    finally:
        engine.close()
    with pytest.raises(UsageError, match="unknown engine 'fak'.*did you mean 'fake'"):
        hosted.start(sys.executable, "fak", "fake", {}, None, None)


def test_a_host_that_dies_is_one_error_and_its_close_says_so() -> None:
    engine = hosted.start(sys.executable, "fake", "fake", {}, None, None)
    pid = engine.processes()[0]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(AbgateError, match=rf"pid {pid}\) went away during tokenize"):
        engine.tokenize("x")
    engine.close()
    assert engine.cleanup_evidence is not None
    assert engine.cleanup_evidence["hosted"]["exit_code"] == -signal.SIGKILL


def test_the_host_dies_with_abgate_even_on_sigkill(tmp_path: Path) -> None:
    script = ("import sys, time\nfrom abgate.engines import hosted\n"
              "e = hosted.start(sys.executable, 'fake', 'fake', {}, None, None)\n"
              "print(e.processes()[0], flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(hosted.__file__)
                                                                 .parents[2])})
    assert proc.stdout is not None
    host = int(proc.stdout.readline())
    assert psutil.pid_exists(host)
    proc.kill()
    proc.wait()
    assert _gone(host), "the engine host outlived a SIGKILLed abgate"


@pytest.mark.parametrize(("flags", "message"), [
    (("--python", "/nonexistent/python3"),
     "engine_options.python: '/nonexistent/python3' is not an executable file"),
    (("--engine", "openai", "--endpoint", "http://127.0.0.1:9", "--python", sys.executable),
     "engine_options.python: engine 'openai' does not run in abgate's process"),
])
def test_bad_interpreters_are_one_line_before_anything_is_written(
        tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    r = fake_run(tmp_path / "r", *flags)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "r").exists()


def test_a_ctrl_c_to_the_terminal_finishes_the_hosted_request_then_stops(tmp_path: Path) -> None:
    """Ctrl-C at a terminal reaches abgate's whole process group; the host sits in a
    session of its own, so the request in flight (request 2 sleeps 2 s in the host) is
    finished and recorded, the run ends ``interrupted`` (exit 130), and the host is gone."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "abgate", "run", "--engine", "fake", "--suite", "synthetic",
           "--max-tokens", "24", "--limit", "4", "--seeds", "0", "-o", str(out),
           "--python", sys.executable, "--engine-arg", "hang_at=2", "--engine-arg", "hang_s=2.0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "samples.jsonl").exists()
                   and (out / "samples.jsonl").read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # request 2 is in flight in the host
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted"
    samples = read_lines(out / "samples.jsonl")
    assert len(samples) == 2 and not any(s.get("error") for s in samples)
    assert run["cleanup"]["verified"] and _gone(run["engine_processes"][0], 1.0)
