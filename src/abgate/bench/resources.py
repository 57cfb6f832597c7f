"""Resources used by the engine: peak resident memory and, on NVIDIA GPUs, GPU memory.

The engine process is the root of the engine's own processes (``Engine.processes()``):
a launched server's leader, or this process for an in-process engine, whose figure
then includes abgate itself (the Python interpreter and the harness, a few tens of
MiB). A remote endpoint has no process here: its resources are not ours to read.
Peak RSS is the kernel's high-water mark (``VmHWM``), so it covers the
model load as well as the bench.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
from collections.abc import Collection
from pathlib import Path

import psutil

from abgate.host import NvmlUnavailable, nvml
from abgate.records.bench_sections import EngineResources, GpuMemory


def peak_rss_bytes(pid: int) -> int | None:
    """High-water resident set size of ``pid`` (Linux ``VmHWM``; elsewhere, for this
    process, ``ru_maxrss``)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if pid == os.getpid():
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    return None


def gpu_memory(pids: Collection[int]) -> list[GpuMemory]:
    """Per NVIDIA GPU: memory used in total and by the engine's processes ``pids`` (a
    served vLLM holds its GPU memory in its EngineCore and workers, not in the leader),
    through NVML; ``[]`` where NVML or GPUs are absent."""
    wanted = set(pids)
    try:
        with nvml() as (nv, handles):
            out = []
            for i, h in enumerate(handles):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                try:
                    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
                    mine = sum(int(p.usedGpuMemory or 0) for p in procs if p.pid in wanted)
                except Exception:  # not supported on every driver / inside containers
                    mine = None
                out.append(GpuMemory(index=i, name=nv.nvmlDeviceGetName(h),
                                     memory_used=int(mem.used), memory_total=int(mem.total),
                                     process_memory_used=mine))
            return out
    except NvmlUnavailable:
        return []


def engine_resources(processes: list[int]) -> EngineResources:
    if not processes:
        return EngineResources(pid=None, in_process=False, peak_rss_bytes=None, rss_bytes=None,
                               gpus=[], note="remote engine: no local process")
    pid = processes[0]
    rss = None
    with contextlib.suppress(psutil.Error):
        rss = psutil.Process(pid).memory_info().rss
    return EngineResources(pid=pid, in_process=pid == os.getpid(),
                           peak_rss_bytes=peak_rss_bytes(pid), rss_bytes=rss,
                           gpus=gpu_memory(processes))


def holds_gpu_memory(resources: EngineResources) -> bool:
    """Whether NVML saw the engine's processes holding memory on a GPU (a launched
    `vllm serve`, say): its roofline needs the GPU's bandwidth, not this host's CPU's."""
    return any(g.process_memory_used for g in resources.gpus or [])
