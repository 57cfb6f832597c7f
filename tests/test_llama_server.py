"""llama.cpp's own server (``llama-server``, built by tests/tools/build_llama_server.sh
from the llama.cpp that the installed llama-cpp-python vendors) as a served engine:
server-rendered chat prompts, a killed server and a resumed run, and a bench of exact
lengths (an A/B of launched llama-servers: tests/test_served_scoring.py). Skipped where
it is not built."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import (
    HANG_S,
    abgate,
    llama_server_launch,
    needs_llama_server,
    read_lines,
    requested_threads,
    wait_until,
)


def _llama_server_run_killed_then_resumed(tmp_path: Path) -> None:
    """``abgate run`` against llama-server: what its stream carries, server-rendered
    prompt SHAs, a server killed mid-run fails the run, ``--resume`` finishes it."""
    tmp_path.mkdir()
    n = requested_threads(1)
    out = tmp_path / "R"
    args = ["run", "--engine", "openai", "--launch", llama_server_launch(), "--suite",
            "synthetic", "--difficulty", "trivial", "--limit", "3", "--max-tokens", "24",
            "--engine-arg", f"threads={n}", "--engine-arg", f"threads-batch={n}",
            "--engine-arg", "parallel=1", "--engine-arg", "ctx-size=2048", "-o", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    samples = out / "samples.jsonl"
    wait_until(lambda: samples.exists() and samples.read_text().count("\n") >= 1, proc,
               "a sample")
    (leader,) = [p for p in psutil.Process(proc.pid).children()
                 if "llama-server" in " ".join(p.cmdline())]
    os.killpg(leader.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, err
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["cleanup"]["server"]["exited_before_stop"]
    assert run["cleanup"]["verified"] and run["cleanup"]["server"]["survivors"] == []
    r = abgate("run", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    final = read_lines(samples)
    assert len({s["key"] for s in final}) == 3 and all(s["prompt"]["sha256"] for s in final)
    assert all(s["finish_reason"] in ("stop", "length") for s in final)
    run = json.loads((out / "run.json").read_text())
    eff = run["engine"]["effective"]
    assert run["status"] == "complete" and run["cleanup"]["verified"]
    assert eff["server_kind"] == "llama.cpp" and eff["chat_prompts"]["prompt_sha"] == "server"
    assert eff["probe"]["usage"] is True  # llama-server reports usage when streaming
    assert (out / "server-llama-server.log").exists()


def _llama_server_bench_exact_prompts_and_lengths(tmp_path: Path) -> None:
    """A bench prompt of exactly N token IDs goes to llama-server as those IDs (its
    tokenizer, asked for the filler, gives the embedded engine's prompt) and exactly M
    output tokens come back (its own ignore_eos)."""
    tmp_path.mkdir()
    n = requested_threads(1)
    bench = ["bench", "--input-len", "64", "--output-len", "16", "--repeats", "1"]
    r = abgate(*bench, "--engine", "openai", "--launch", llama_server_launch(),
               "--engine-arg", f"threads={n}", "--engine-arg", f"threads-batch={n}",
               "--engine-arg", "parallel=1", "--engine-arg", "ctx-size=2048",
               "-o", str(tmp_path / "S"))
    assert r.returncode == 0, r.stderr
    r = abgate(*bench, "--engine-arg", "n_ctx=2048", "--engine-arg", f"n_threads={n}",
               "--engine-arg", f"n_threads_batch={n}", "-o", str(tmp_path / "E"))
    assert r.returncode == 0, r.stderr
    served, emb = (json.loads((tmp_path / d / "summary.json").read_text())["cases"][0]
                   for d in ("S", "E"))
    assert served["prompt_sha256"] == emb["prompt_sha256"] and served["prompt_tokens"] == 64
    assert [s["output"]["tokens"] for s in read_lines(tmp_path / "S" / "samples.jsonl")] \
        == [16, 16]  # the warm-up and the measured repeat
    run = json.loads((tmp_path / "S" / "run.json").read_text())
    assert run["engine"]["effective"]["ignore_eos"] == "server parameter"
    assert run["cleanup"]["verified"]


@needs_llama_server
@pytest.mark.engine
@pytest.mark.cost(14)
def test_llama_server_ab_killed_run_and_bench(tmp_path: Path) -> None:
    """llama-server two ways, each its own launches: a run whose server is killed and
    then resumed, and a bench of exact prompt lengths. (An A/B of launched llama-servers
    with server-rendered prompts: tests/test_served_scoring.py's three-arm A/B, which
    checks what this file's own f16/q8 A/B did.)"""
    _llama_server_run_killed_then_resumed(tmp_path / "killed")
    _llama_server_bench_exact_prompts_and_lengths(tmp_path / "bench")
