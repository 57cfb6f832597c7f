"""Tensor-parallel engines on the CPU (issue 23, item 5): several real processes stand in
for the ranks of ``vllm serve --tensor-parallel-size N`` (``tests/support/tp_server.py``:
a leader and N rank processes titled ``VLLM::Worker_TP<i>``, each mapping a real shared
library), launched by abgate through the real supervisor, so every N-worker code path
runs here: NVLink multicast off in every rank's environment, per-rank library maps and
the contract's "every" check naming the rank that lacks a library, per-pid cleanup
evidence, and a SIGKILL of one rank and of abgate leaving no survivor."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from abgate.engines.shared import server as server
from abgate.engines.shared import server_cleanup as server_cleanup
from abgate.engines.shared.multicast import MULTICAST_OFF
from tests.conftest import abgate, error_lines, read_lines, wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs /proc and prctl")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    """A real shared library the interpreter does not load by itself, at its own path."""
    for name in ("_statistics", "_bisect", "_heapq", "_json"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".so"):
            dest = tmp_path / "build" / "libabgate_tp_rank.so"
            dest.parent.mkdir()
            shutil.copyfile(spec.origin, dest)
            return dest
    pytest.skip("no standalone extension .so available")


def tp_launch(tmp_path: Path, marker: str, *flags: str) -> str:
    """``--launch`` for the stand-in TP server (its rank pids go to tmp_path/ranks.json)."""
    return " ".join([sys.executable, "-m", "tests.support.tp_server", "--port {port}",
                     "--pids", str(tmp_path / "ranks.json"), *flags, marker])


def ranks(tmp_path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in json.loads((tmp_path / "ranks.json").read_text()).items()}


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)


def with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if marker in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


# -- (a) NVLink multicast off in every process of a launched server -----------------------


def test_multicast_off_reaches_the_leader_and_every_rank(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # inherited: overridden in the server
    monkeypatch.chdir(REPO)
    marker = f"m{uuid.uuid4().hex[:8]}"
    s = server.launch(tp_launch(tmp_path, marker, "--ranks", "3"), model="", args={},
                      log_dir=tmp_path, ready_timeout=60, grace_s=2.0)
    try:
        pids = s.pids()
        assert set(ranks(tmp_path).values()) <= set(pids) and len(pids) >= 4
        for pid in pids:  # the leader and the three ranks, read from the kernel
            env = environ(pid)
            assert {k: env.get(k) for k in MULTICAST_OFF} == dict(MULTICAST_OFF), pid
    finally:
        ev = s.stop()
    assert os.environ["NCCL_NVLS_ENABLE"] == "1"  # abgate's own environment is untouched
    assert ev["verified"], ev
    seen = {p["pid"]: p for p in ev["processes"]}
    for rank, pid in ranks(tmp_path).items():
        assert seen[pid]["exited"] and seen[pid]["role"] == "worker"
        assert seen[pid]["rank"] == rank
    assert all(p["exited"] for p in ev["processes"])


def test_env_turning_multicast_on_is_refused_before_anything(tmp_path: Path) -> None:
    out = tmp_path / "R"
    r = abgate("run", "--engine", "fake", "--suite", "synthetic", "--limit", "2",
               "--env", "NCCL_NVLS_ENABLE=1", "-o", str(out), timeout=120)
    assert r.returncode == 2, r.stderr
    (line,) = error_lines(r.stderr)
    assert "NCCL_NVLS_ENABLE=1" in line and "multicast" in line
    assert not out.exists()


# -- (b) + (c) a run over N ranks: env snapshot, per-rank libraries, per-pid cleanup ------


def contract(tmp_path: Path, lib: Path) -> Path:
    path = tmp_path / "contract.toml"
    path.write_text(f'name = "tp2"\n[settings]\ntensor_parallel_size = 2\n'
                    f'pipeline_parallel_size = 1\n[libraries]\nrequired = ["{lib}"]\n'
                    'mode = "every"\n')
    return path


def run_tp(tmp_path: Path, lib: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    marker = f"m{uuid.uuid4().hex[:8]}"
    return abgate("run", "--engine", "openai", "--suite", "synthetic", "--limit", "2",
                  "--max-tokens", "4", "--launch",
                  tp_launch(tmp_path, marker, "--lib", str(lib), *flags),
                  "--contract", str(contract(tmp_path, lib)), "-o", str(tmp_path / "R"),
                  timeout=300, cwd=REPO)


def test_every_rank_maps_the_library_and_the_record_says_so(tmp_path: Path, lib: Path) -> None:
    r = run_tp(tmp_path, lib, "--ranks", "2", "--helper")
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "R" / "run.json").read_text())
    prov = run["provenance"]
    assert {k: prov["environment"]["env"].get(k) for k in MULTICAST_OFF} == dict(MULTICAST_OFF)
    by_rank = {m["rank"]: m for m in prov["libraries"] if m["rank"]}
    assert set(by_rank) == {"TP0", "TP1"}
    for rank, pid in ranks(tmp_path).items():
        libs = {x["path"]: x for x in by_rank[rank]["libs"]}
        assert by_rank[rank]["pid"] == pid and by_rank[rank]["role"] == "worker"
        assert libs[str(lib)]["sha256"] and by_rank[rank]["cmdline"][0] == f"VLLM::Worker_{rank}"
    helpers = [m for m in prov["libraries"] if m["role"] == "helper"]
    assert helpers and all(str(lib) not in {x["path"] for x in m["libs"]} for m in helpers)
    assert prov["contract"]["passed"] and "libraries" in prov["contract"]["checked"]
    eff = run["engine"]["effective"]  # seen from the ranks the server started
    assert (eff["tensor_parallel_size"], eff["pipeline_parallel_size"]) == (2, 1)
    ev = run["cleanup"]["server"]
    assert ev["verified"] and ev["survivors"] == [] and ev["port_free"]
    assert {p["pid"] for p in ev["processes"]} >= set(ranks(tmp_path).values())
    assert all(p["exited"] for p in ev["processes"])
    assert ev["gpu"]["checked"] is False and ev["gpu"]["reason"]  # no NVML here, said so


def test_a_rank_that_does_not_map_the_library_is_named(tmp_path: Path, lib: Path) -> None:
    r = run_tp(tmp_path, lib, "--ranks", "3", "--skip-rank", "1")
    assert r.returncode == 1, r.stderr
    pid = ranks(tmp_path)["TP1"]
    (line,) = [ln for ln in error_lines(r.stderr) if "violated" in ln]
    assert "(2 clauses)" in line and "settings.tensor_parallel_size: expected 2, got 3" in line
    assert f"rank TP1, pid {pid} (" in line and "did not map libabgate_tp_rank.so" in line
    assert "rank TP0" not in line and "rank TP2" not in line
    run = json.loads((tmp_path / "R" / "run.json").read_text())
    eff, lib_v = run["provenance"]["contract"]["violations"]
    assert eff["stage"] == "effective" and eff["actual"] == 3
    assert lib_v["stage"] == "libraries" and f"pid {pid}" in lib_v["message"]
    assert run["cleanup"]["server"]["verified"]


# -- (c) SIGKILL of one rank and of abgate: nothing survives, and the log says so ---------


def test_sigkill_of_a_rank_and_of_abgate_leaves_no_survivor(tmp_path: Path, lib: Path) -> None:
    marker = f"m{uuid.uuid4().hex[:8]}"
    out = tmp_path / "R"
    proc = subprocess.Popen(
        [sys.executable, "-m", "abgate", "run", "--engine", "openai", "--suite", "synthetic",
         "--limit", "50", "--max-tokens", "64", "--launch",
         tp_launch(tmp_path, marker, "--ranks", "2", "--lib", str(lib)), "-o", str(out)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (out / "samples.jsonl").exists()
                   and bool(read_lines(out / "samples.jsonl")), proc, "a first sample")
        workers = ranks(tmp_path)
        tree = with_marker(marker)
        ports = {c.laddr.port for p in tree for c in _listening(p)}
        os.kill(workers["TP1"], signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    while with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert with_marker(marker) == [], [p.cmdline() for p in with_marker(marker)]
    for pid in workers.values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert ports and all(server_cleanup.port_is_free(port) for port in ports)
    (log_path,) = out.glob("server-*.log")
    log = log_path.read_text()
    said = [ln for ln in log.splitlines() if ln.startswith("# abgate-supervise:")]
    assert said and "died" in said[-1] and "no process survives" in said[-1], log[-2000:]


def _listening(p: psutil.Process) -> list[psutil._common.pconn]:
    try:
        return [c for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        return []

