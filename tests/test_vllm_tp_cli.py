"""``abgate run --engine vllm --engine-arg tensor_parallel_size=N`` end to end on the CPU:
the real CLI in a subprocess, with a stand-in ``vllm`` package on its PYTHONPATH
(``tests/support/vllm_stand_in``: real rank processes titled ``VLLM::Worker_TP<i>``; real
vLLM cannot run here). What runs for real is abgate: the multicast-off env around the
load, the run's env snapshot, per-rank library maps and the contract (parallel sizes and
a library every process maps), per-pid cleanup, and the workers' watchdog that ends
them when abgate is SIGKILLed, saying so in ``engine-watchdog.log``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from abgate.engines.shared.multicast import MULTICAST_OFF
from tests.conftest import REPO, abgate, error_lines, read_lines, wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs /proc and prctl")
STAND_IN = REPO / "tests" / "support" / "vllm_stand_in"


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    for name in ("_statistics", "_bisect", "_heapq", "_json"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".so"):
            dest = tmp_path / "libabgate_cli_rank.so"
            shutil.copyfile(spec.origin, dest)
            return dest
    pytest.skip("no standalone extension .so available")


def stand_in_env(lib: Path, skip: str | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(STAND_IN), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "ABGATE_STAND_IN_LIB": str(lib),
            **({"ABGATE_STAND_IN_SKIP": skip} if skip else {})}


def run_args(out: Path, tp: int, limit: int = 2, max_tokens: int = 4) -> list[str]:
    return ["run", "--engine", "vllm", "--model", "stand/in", "--engine-arg",
            f"tensor_parallel_size={tp}", "--suite", "synthetic", "--limit", str(limit),
            "--max-tokens", str(max_tokens), "-o", str(out)]


def contract(tmp_path: Path, lib: Path) -> Path:
    path = tmp_path / "tp2.toml"
    path.write_text('engine = "vllm"\n[settings]\ntensor_parallel_size = 2\n'
                    f'pipeline_parallel_size = 1\n[libraries]\nrequired = ["{lib}"]\n'
                    'mode = "every"\n')
    return path


def test_tp2_run_records_every_rank_and_holds_its_contract(tmp_path: Path, lib: Path) -> None:
    out = tmp_path / "R"
    r = abgate(*run_args(out, 2), "--contract", str(contract(tmp_path, lib)),
               env=stand_in_env(lib), timeout=300)
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["engine"]["effective"]["tensor_parallel_size"] == 2
    prov = run["provenance"]
    assert {k: prov["environment"]["env"].get(k) for k in MULTICAST_OFF} == dict(MULTICAST_OFF)
    ranks = {m["rank"]: m for m in prov["libraries"] if m["role"] == "worker"}
    assert set(ranks) == {"TP0", "TP1"} and prov["contract"]["passed"]
    assert all(str(lib) in {x["path"] for x in m["libs"]} for m in prov["libraries"])
    assert len(prov["libraries"]) == 3  # abgate (the frontend) and two ranks; no watchdog
    ev = run["cleanup"]
    assert ev["verified"] and ev["survivors"] == [] and ev["workers_seen"] == 2
    assert {w["rank"] for w in ev["workers"]} == {"TP0", "TP1"}
    assert all(w["exited"] for w in ev["workers"])
    assert not (out / "engine-watchdog.log").exists()  # abgate closed the engine itself


def test_a_rank_lacking_the_library_fails_the_contract_naming_it(tmp_path: Path,
                                                                 lib: Path) -> None:
    out = tmp_path / "R"
    r = abgate(*run_args(out, 2), "--contract", str(contract(tmp_path, lib)),
               env=stand_in_env(lib, skip="TP1"), timeout=300)
    assert r.returncode == 1, r.stderr
    (line,) = [ln for ln in error_lines(r.stderr) if "violated" in ln]
    run = json.loads((out / "run.json").read_text())
    pid = next(m["pid"] for m in run["provenance"]["libraries"] if m["rank"] == "TP1")
    assert "(1 clause)" in line and f"rank TP1, pid {pid} (" in line
    assert "did not map libabgate_cli_rank.so" in line and "rank TP0" not in line
    assert run["status"] == "failed" and run["cleanup"]["verified"]


def test_a_request_for_another_tp_is_refused_before_the_load(tmp_path: Path, lib: Path) -> None:
    out = tmp_path / "R"
    r = abgate(*run_args(out, 3), "--contract", str(contract(tmp_path, lib)),
               env=stand_in_env(lib), timeout=300)
    assert r.returncode == 2, r.stderr
    (line,) = error_lines(r.stderr)
    assert "[request] settings.tensor_parallel_size: expected 2, got 3" in line
    assert not out.exists()


def test_sigkill_of_a_rank_and_of_abgate_leaves_no_worker(tmp_path: Path, lib: Path) -> None:
    out = tmp_path / "R"
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *run_args(out, 2, 200, 32)],
                            env={**os.environ, **stand_in_env(lib)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (out / "samples.jsonl").exists()
                   and bool(read_lines(out / "samples.jsonl")), proc, "a first sample")
        workers = {p.cmdline()[0]: p for p in psutil.Process(proc.pid).children(recursive=True)
                   if p.cmdline() and p.cmdline()[0].startswith("VLLM::")}
        assert set(workers) == {"VLLM::Worker_TP0", "VLLM::Worker_TP1"}
        workers["VLLM::Worker_TP1"].kill()
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    survivor = workers["VLLM::Worker_TP0"]
    log = out / "engine-watchdog.log"
    deadline = time.monotonic() + 30  # the watchdog writes its line once it is done
    while not (log.exists() and log.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(survivor) and not _running(workers["VLLM::Worker_TP1"])
    said = log.read_text().strip().splitlines()
    assert len(said) == 1 and f"abgate (pid {proc.pid}) died" in said[0], said
    assert f"SIGTERM to 1 process(es) [{survivor.pid}]" in said[0]
    assert said[0].endswith("no process survives")


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
