"""The in-process vLLM engine at tensor_parallel_size N, on the CPU.

Real vLLM cannot run on this machine, so a stand-in ``vllm`` module takes its place: its
``LLM`` starts one real process per rank, titled as vLLM titles them
(``VLLM::Worker_TP<i>``), and exposes a ``vllm_config`` stand-in whose parallel sizes are
the requested ones. What runs for real is the adapter's own code: the multicast-off
environment around the load (read back from each rank's ``/proc/<pid>/environ``), the
worker discovery, the effective-config reader that a contract's ``tensor_parallel_size``
/ ``pipeline_parallel_size`` clauses are checked against, the library maps of every rank,
and the per-pid cleanup evidence. Per-GPU cleanup runs on a stand-in NVML with two
devices (no NVML here; the real one is exercised on the GPU machine, docs/gpu.md)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from abgate.engines.shared import server_cleanup as server_cleanup
from abgate.engines.shared.multicast import MULTICAST_OFF
from abgate.engines.shared.process_roles import process_role
from abgate.engines.vllm import engine as ve
from abgate.provenance.contract import check_effective, check_libraries, load_contract
from abgate.provenance.libmaps import (
    MappedLib,
    RequiredLib,
    WorkerMapping,
    check_required,
    snapshot_pids,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs /proc")
RANK = ("import ctypes, sys, time\nif sys.argv[1]:\n    ctypes.CDLL(sys.argv[1])\n"
        "print('ready', flush=True)\ntime.sleep(60)\n")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)


@pytest.fixture
def tp_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A stand-in vllm whose LLM starts ``tensor_parallel_size x pipeline_parallel_size``
    rank processes (``lib`` mapped by all but ``skip``); they end at shutdown."""
    ns = types.SimpleNamespace
    state: dict[str, Any] = {"lib": "", "skip": None, "ranks": {}}

    class LLM:
        def __init__(self, model: str, **kw: Any) -> None:
            tp, pp = kw.get("tensor_parallel_size", 1), kw.get("pipeline_parallel_size", 1)
            procs = []
            for p in range(pp):
                for t in range(tp):
                    name = "_".join(x for x in (f"PP{p}" if pp > 1 else "",
                                                f"TP{t}" if tp > 1 else "") if x)
                    lib = "" if name == state["skip"] else state["lib"]
                    procs.append(subprocess.Popen([f"VLLM::Worker_{name}", "-c", RANK, lib],
                                                  executable=sys.executable,
                                                  stdout=subprocess.PIPE, text=True))
                    state["ranks"][name] = procs[-1].pid
            for proc in procs:  # loaded: as vLLM's LLM() returns once its workers are up
                assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            state["env_at_load"] = {k: os.environ.get(k) for k in MULTICAST_OFF}

            def shutdown() -> None:
                for proc in procs:
                    proc.terminate()
                    proc.communicate(timeout=10)

            self.llm_engine = ns(
                engine_core=ns(shutdown=shutdown),
                vllm_config=ns(parallel_config=ns(tensor_parallel_size=tp,
                                                  pipeline_parallel_size=pp,
                                                  distributed_executor_backend="mp")))

        def get_tokenizer(self) -> Any:
            return ns(encode=lambda text, add_special_tokens=True: [ord(c) for c in text])

    mod = types.ModuleType("vllm")
    mod.__version__ = "0.0-tp-stand-in"  # type: ignore[attr-defined]
    mod.LLM = LLM  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    yield state


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    for name in ("_statistics", "_bisect", "_heapq", "_json"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".so"):
            dest = tmp_path / "libabgate_vllm_rank.so"
            shutil.copyfile(spec.origin, dest)
            return dest
    pytest.skip("no standalone extension .so available")


def _contract(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_contract(path)


def test_every_rank_starts_with_multicast_off(tp_vllm: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0")
    engine = ve.load("m", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, {})
    try:
        assert tp_vllm["env_at_load"] == dict(MULTICAST_OFF)
        assert len(tp_vllm["ranks"]) == 4
        for pid in tp_vllm["ranks"].values():
            env = _environ(pid)
            assert {k: env.get(k) for k in MULTICAST_OFF} == dict(MULTICAST_OFF)
        assert "NCCL_NVLS_ENABLE" not in os.environ  # restored in abgate's own process
        assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "0"
        assert engine.process_env == MULTICAST_OFF  # the run's env snapshot records these
        assert set(engine.processes()[1:]) == set(tp_vllm["ranks"].values())
    finally:
        engine.close()
    ev = engine.cleanup_evidence
    assert ev is not None and ev["verified"] and ev["workers_seen"] == 4
    assert {w["rank"] for w in ev["workers"]} == {"PP0_TP0", "PP0_TP1", "PP1_TP0", "PP1_TP1"}
    assert all(w["exited"] and w["role"] == "worker" for w in ev["workers"])


def test_contract_parallel_sizes_against_the_effective_config(tp_vllm: dict[str, Any],
                                                              tmp_path: Path) -> None:
    """The adapter's config reader on the stand-in's ``vllm_config`` (real vLLM's
    ``parallel_config`` has the same fields; checked for real by benchmarks/gpu_vllm_tp.py)."""
    contract = _contract(tmp_path, "engine = \"vllm\"\n[settings]\ntensor_parallel_size = 2\n"
                                   "pipeline_parallel_size = 1\n")
    for tp, pp, broken in ((2, 1, []), (1, 1, ["tensor_parallel_size"]),
                           (2, 2, ["pipeline_parallel_size"])):
        engine = ve.load("m", {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}, {})
        try:
            eff = engine.describe().effective_config
        finally:
            engine.close()
        found = check_effective(contract, "vllm", eff)
        assert [v.clause for v in found] == [f"settings.{k}" for k in broken]
        for v in found:
            want = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}[v.clause[9:]]
            assert v.stage == "effective" and v.message().endswith(
                f"expected {want}, got {eff[v.clause[9:]]}")


def test_the_rank_that_lacks_a_library_is_named(tp_vllm: dict[str, Any], lib: Path,
                                                tmp_path: Path) -> None:
    tp_vllm.update(lib=str(lib), skip="TP2")
    engine = ve.load("m", {"tensor_parallel_size": 4}, {})
    try:
        maps = snapshot_pids(engine.processes()[1:])  # the ranks (this process is pytest)
        contract = _contract(tmp_path, f'[libraries]\nrequired = ["{lib}"]\nmode = "every"\n')
        found = check_libraries(contract, maps, tmp_path)
    finally:
        engine.close()
    assert [m.rank for m in maps] == ["TP0", "TP1", "TP2", "TP3"]
    (v,) = found
    assert f"rank TP2, pid {tp_vllm['ranks']['TP2']} (" in v.message()
    assert "did not map libabgate_vllm_rank.so" in v.message()


# -- the pure parts --------------------------------------------------------------------


@pytest.mark.parametrize(("cmdline", "role", "rank"), [
    (["VLLM::Worker_TP1      "], "worker", "TP1"),
    (["VLLM::Worker_PP1_TP0"], "worker", "PP1_TP0"),
    (["VLLM::Worker"], "worker", None),
    (["VLLM::EngineCore   "], "engine_core", None),
    (["VLLM::APIServer"], "api_server", None),
    (["sglang::scheduler_TP3"], "scheduler", "TP3"),
    (["python3", "-c", "from multiprocessing.resource_tracker import main;main(7)"],
     "helper", None),
    (["python3", "-m", "abgate", "run"], "process", None),
])
def test_process_roles(cmdline: list[str], role: str, rank: str | None) -> None:
    assert process_role("python3", cmdline) == (role, rank)


def test_helpers_are_exempt_from_every_but_not_from_a_wrong_copy() -> None:
    req = RequiredLib("/b/libx.so", "a" * 64)
    rank = WorkerMapping(2, "VLLM::Worker_TP0", ("VLLM::Worker_TP0",),
                         (MappedLib("/b/libx.so", "a" * 64, 1),), role="worker", rank="TP0")
    helper = WorkerMapping(3, "python3", ("python3",), (), role="helper")
    assert check_required([req], [rank, helper], "every") == []
    stale = WorkerMapping(4, "python3", ("python3",), (MappedLib("/old/libx.so", "b" * 64, 1),),
                          role="helper")
    (issue,) = check_required([req], [rank, stale], "every")
    assert "pid 4" in issue.message() and "/old/libx.so" in issue.message()
    unreadable = WorkerMapping(5, "?", (), (), error="AccessDenied", role="worker", rank="TP1")
    (issue,) = check_required([req], [rank, unreadable], "every")
    assert issue.worker == "rank TP1, pid 5 (?)" and "unreadable" in issue.reason


class _Nvml:
    """A stand-in pynvml with two devices whose used memory the test sets."""

    def __init__(self, used: list[int]) -> None:
        self.used = used

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.used)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        return types.SimpleNamespace(used=self.used[h], total=150 << 30)

    def nvmlDeviceGetUUID(self, h: int) -> bytes:  # noqa: N802
        return f"GPU-{h:04d}".encode()


def test_cleanup_evidence_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _Nvml([1 << 30, 2 << 30])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    before = server_cleanup.gpu_memory()
    assert before["devices"] == [{"index": 0, "uuid": "GPU-0000", "used_bytes": 1 << 30},
                                 {"index": 1, "uuid": "GPU-0001", "used_bytes": 2 << 30}]
    nv.used = [(1 << 30) + (100 << 20), 2 << 30]  # GPU 0 within 256 MiB, GPU 1 back
    ok = server_cleanup.gpu_returned(before, wait_s=0)
    assert ok["returned"] and [d["returned"] for d in ok["devices"]] == [True, True]
    nv.used = [1 << 30, 6 << 30]  # GPU 1 still holds 4 GiB
    bad = server_cleanup.gpu_returned(before, wait_s=0)
    assert not bad["returned"] and [d["returned"] for d in bad["devices"]] == [True, False]
    assert bad["devices"][1] == {"index": 1, "uuid": "GPU-0001", "before_bytes": 2 << 30,
                                 "after_bytes": 6 << 30, "tolerance_bytes": 256 << 20,
                                 "returned": False}
    nv.used = [1 << 30]  # a device gone from NVML is not "returned"
    gone = server_cleanup.gpu_returned(before, wait_s=0)
    assert not gone["returned"] and gone["devices"][1]["after_bytes"] is None


def test_parallel_sizes_from_the_ranks_a_server_started() -> None:
    from abgate.engines.shared.process_roles import parallel_sizes

    def sizes(*titles: str) -> tuple[int, int] | None:
        got = parallel_sizes(process_role("python3", [t]) for t in titles)
        return (got["tensor_parallel_size"], got["pipeline_parallel_size"]) if got else None

    assert sizes("VLLM::APIServer", "VLLM::EngineCore") == (1, 1)  # TP1: no worker process
    assert sizes("VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1") == (2, 1)
    assert sizes(*(f"VLLM::Worker_PP{p}_TP{t}" for p in range(2) for t in range(4))) == (4, 2)
    assert sizes("python3", "llama-server") is None  # not a known engine: nothing claimed
