"""Which memory a bench's roofline is measured against: the GPU's for an engine whose
processes hold GPU memory (a launched `vllm serve`), this host's CPU's for an engine that
runs here on the CPU, none for a remote endpoint; a declared ``--peak-bw`` wins."""

from __future__ import annotations

from typing import Any

import pytest

from abgate.bench import session
from abgate.bench.resources import engine_resources, holds_gpu_memory
from abgate.records.bench_sections import EngineResources, GpuMemory, PeakBandwidth
from abgate.records.sections import CapabilitiesRecord, EngineRecord


def described(name: str, **effective: Any) -> EngineRecord:
    return EngineRecord(name=name, effective_config=effective,
                        capabilities=CapabilitiesRecord())


SERVED = described("openai", server_kind="vllm")


def _probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []

    def probe(name: str, gbps: float, source: str) -> Any:
        return lambda *a: ran.append(name) or PeakBandwidth(gbps=gbps, source=source)

    monkeypatch.setattr(session, "measure_gpu_bandwidth", probe("gpu", 4100.0, "gpu probe"))
    monkeypatch.setattr(session, "measure_gpu_bandwidth_in_child",
                        probe("gpu child", 4000.0, "gpu"))
    monkeypatch.setattr(session, "measure_peak_bandwidth", probe("cpu", 50.0, "cpu probe"))
    return ran


def _gpus(used: int | None) -> list[GpuMemory]:
    return [GpuMemory(index=0, name="GPU", memory_used=1, memory_total=2,
                      process_memory_used=used)]


def test_a_launched_server_on_a_gpu_gets_the_gpu_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _probes(monkeypatch)
    res = EngineResources(pid=4321, in_process=False, gpus=_gpus(15 << 30))
    assert holds_gpu_memory(res)
    assert session.peak_bandwidth(session.BenchConfig(), SERVED, res).gbps == 4000.0
    assert ran == ["gpu child"]  # abgate's own process opens no CUDA context for a server
    vllm = described("vllm")  # in this process: probed here
    assert session.peak_bandwidth(session.BenchConfig(), vllm, res).gbps == 4100.0
    assert ran == ["gpu child", "gpu"]


def test_a_local_server_on_the_cpu_gets_the_cpu_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _probes(monkeypatch)
    for gpus in ([], _gpus(0), _gpus(None)):  # no NVML; a GPU the server does not use
        res = EngineResources(pid=4321, in_process=False, gpus=gpus)
        assert session.peak_bandwidth(session.BenchConfig(), SERVED, res).gbps == 50.0
    assert ran == ["cpu"] * 3


def test_a_remote_endpoint_gets_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _probes(monkeypatch)
    got = session.peak_bandwidth(session.BenchConfig(), SERVED, engine_resources([]))
    assert got.gbps is None and "--peak-bw" in (got.source or "") and ran == []
    declared = session.peak_bandwidth(session.BenchConfig(peak_bw_gbps=4800.0), SERVED,
                                      engine_resources([]))
    assert declared.model_dump() == {"gbps": 4800.0, "source": "declared (--peak-bw)"}
    assert ran == []


def test_the_child_probe_reports_a_figure_or_why_not() -> None:
    """Runs the real child process: on a host without CUDA it says so in one line."""
    from abgate.bench.roofline import measure_gpu_bandwidth_in_child

    got = measure_gpu_bandwidth_in_child(timeout_s=120)
    assert got.gbps is None or got.gbps > 0
    if got.gbps is None:
        assert (got.source or "").startswith("unknown")
