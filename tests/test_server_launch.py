"""Managed servers: command building, readiness, verified cleanup on every way out."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from abgate.engines.shared import server as server
from abgate.engines.shared import server_cleanup as server_cleanup
from abgate.errors import AbgateError, UsageError
from tests.conftest import abgate, default_sigint, read_lines, thread_flags
from tests.test_openai_engine import FAKE_SERVER, needs_server


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fake") / "fake_server.py"
    path.write_text(FAKE_SERVER)
    return path


def cmd(script: Path, *flags: str) -> str:
    return " ".join([sys.executable, str(script), "--port {port}", *flags])


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if marker in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


# -- command line -------------------------------------------------------------------------


def test_engine_args_become_server_flags() -> None:
    args = {"tensor-parallel-size": 2, "enable-prefix-caching": True, "enforce-eager": False,
            "tensor_split": [0.5, 0.5], "compilation-config": {"level": 3}, "seed": None,
            "dtype": "bfloat16"}
    assert server.arg_flags(args, "flag") == [
        "--tensor-parallel-size", "2", "--enable-prefix-caching", "--no-enforce-eager",
        "--tensor_split", "0.5", "0.5", "--compilation-config", '{"level":3}',
        "--dtype", "bfloat16"]
    assert server.arg_flags({"cache": False, "flash_attn": True}, "value") == [
        "--cache", "false", "--flash_attn", "true"]


def test_build_command_placeholders_and_redaction() -> None:
    run, shown = server.build_command(
        "python -m llama_cpp.server --model {model} --host {host} --port {port} "
        "--api_key {api_key} --kv_overrides '{\"a\": 1}'",
        port=8123, model="/m.gguf", args={"cache": False}, api_key="sk-1")
    assert run[3:] == ["--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8123",
                       "--api_key", "sk-1", "--kv_overrides", '{"a": 1}', "--cache", "false"]
    assert "sk-1" not in shown and "<redacted>" in shown
    vllm, _ = server.build_command("vllm serve {model} --port {port}", port=1, model="m",
                                   args={"enable-prefix-caching": True})
    assert vllm[-1] == "--enable-prefix-caching"  # vLLM booleans are flags
    assert server.server_name(vllm) == "vllm" and server.server_name(run) == "llama_cpp"
    assert server.server_name(["python3", "/x/fake.py", "--port", "1"]) == "fake"


@pytest.mark.parametrize(("template", "message"), [
    ("vllm serve m", "must contain {port}"),
    ("", "empty command"),
    ("vllm serve 'm --port {port}", "cannot split"),
    ("vllm serve {model} --port {port}", "no --model"),
    ("x --api-key {api_key} --port {port}", "no --api-key-env"),
])
def test_bad_launch_commands(template: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("{", r"\{").replace("}", r"\}")):
        server.build_command(template, port=1, model="", args={})


def test_ports() -> None:
    port = server_cleanup.free_port()
    assert server_cleanup.port_is_free(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert not server_cleanup.port_is_free(port)
    assert server_cleanup.port_is_free(port)


def test_gpu_check_says_why_it_was_skipped() -> None:
    before = server_cleanup.gpu_memory()
    if before["available"]:
        pytest.skip("an NVIDIA GPU is visible; the skip path is not exercised")
    assert before["reason"]
    assert server_cleanup.gpu_returned(before) == {"checked": False, "reason": before["reason"]}


# -- launching and stopping ---------------------------------------------------------------


def test_stubborn_server_tree_is_killed_and_verified(fake: Path, tmp_path: Path) -> None:
    # the leader ignores SIGTERM: SIGKILL follows after any grace period (0.3 s here)
    s = server.launch(cmd(fake, "--stubborn", "--spawn"), model="", args={}, log_dir=tmp_path,
                      ready_timeout=30, grace_s=0.3)
    assert s.alive() and len(s.tracker.seen) >= 3  # leader, a child, an escaped child
    pids = list(s.tracker.seen)
    ev = s.stop()
    assert [x["signal"] for x in ev["signals"]] == ["SIGTERM", "SIGKILL"]
    assert ev["verified"] and ev["survivors"] == [] and ev["port_free"]
    assert not ev["exited_before_stop"] and ev["exit_code"] == -signal.SIGKILL
    assert s.stop() is ev  # idempotent
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    log = (tmp_path / "server-fake_server.log").read_text()
    assert log.startswith("# abgate ") and "fake server ready" in log and "cleanup" in log


def test_not_ready_in_time_fails_with_log_tail(fake: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(AbgateError, match="not ready after 1.5 s") as info:
        server.launch(cmd(fake, "--never-ready", "--spawn"), model="", args={},
                      log_dir=tmp_path, ready_timeout=1.5, grace_s=1.0)
    assert "fake server starting" in str(info.value) and "cleanup verified" in str(info.value)
    assert len(str(info.value).splitlines()) == 1
    ev = info.value.cleanup_evidence  # type: ignore[attr-defined]
    assert ev["verified"] and ev["survivors"] == []
    assert time.monotonic() - t0 < 20


def test_server_exiting_early_fails_fast(fake: Path, tmp_path: Path) -> None:
    with pytest.raises(AbgateError, match="exited with code 3 before it was ready") as info:
        server.launch(cmd(fake, "--exit-early"), model="", args={}, log_dir=tmp_path,
                      ready_timeout=60)
    assert "fatal: cannot load model" in str(info.value)
    assert info.value.cleanup_evidence["exited_before_stop"]  # type: ignore[attr-defined]


def test_missing_program_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot start"):
        server.launch("/nonexistent/abgate-server --port {port}", model="", args={},
                      log_dir=tmp_path, ready_timeout=5)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_abgate_stops_the_server(fake: Path, tmp_path: Path,
                                           sig: signal.Signals) -> None:
    out = tmp_path / "R"
    marker = f"m{uuid.uuid4().hex[:8]}"
    args = ["run", "--suite", "synthetic", "--limit", "4", "--max-tokens", "40",
            "--engine", "openai", "--launch", cmd(fake, "--delay 0.05", "--spawn", marker),
            "-o", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not ((out / "samples.jsonl").exists() and read_lines(out / "samples.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.05)
    assert processes_with(marker)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted"
    ev = run["cleanup"]["server"]
    assert ev["verified"] and ev["survivors"] == [] and ev["port_free"]
    assert ev["processes_tracked"] >= 3
    assert processes_with(marker) == []


def test_server_stops_when_abgate_is_killed_outright(fake: Path, tmp_path: Path) -> None:
    """SIGKILL cannot be handled; the leader's parent-death signal is the safety net."""
    marker = f"m{uuid.uuid4().hex[:8]}"
    args = ["run", "--suite", "synthetic", "--limit", "3", "--max-tokens", "40",
            "--engine", "openai", "--launch", cmd(fake, "--delay 0.1", marker),
            "-o", str(tmp_path / "R")]
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not processes_with(marker):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


@needs_server
@pytest.mark.server
@pytest.mark.engine
def test_bad_model_path_fails_fast_and_leaves_nothing(tmp_path: Path) -> None:
    missing = f"/nonexistent/abgate-{uuid.uuid4().hex[:8]}.gguf"
    launch = (f"{sys.executable} -m llama_cpp.server --model {{model}} --host {{host}} "
              "--port {port}")
    ready_timeout = 300
    t0 = time.monotonic()
    r = abgate("run", "--suite", "synthetic", "--limit", "1", "--engine", "openai",
               "--model", missing, "--launch", launch, "--ready-timeout", str(ready_timeout),
               *thread_flags(), "-o", str(tmp_path / "R"), timeout=2 * ready_timeout)
    assert r.returncode == 1, r.stderr
    # fast = it noticed the exit instead of waiting out the readiness timeout (the line
    # below says so); the clock only checks the relation, not a figure of this host
    assert time.monotonic() - t0 < ready_timeout
    line = r.stderr.strip().splitlines()[-1]
    assert "exited with code" in line and "before it was ready" in line
    assert "Model path does not exist" in line and "cleanup verified" in line
    assert processes_with(missing) == []
    run = json.loads((tmp_path / "R" / "run.json").read_text())
    assert run["status"] == "failed" and "exited with code" in run["error"]
    log = (tmp_path / "R" / "server-llama_cpp.log").read_text()
    assert '"verified": true' in log
