"""Host load: what else the machine was doing while abgate measured speed.

:func:`snapshot` is taken at the start and end of each arm, block or baseline run: the
1-minute load average against the cores, the CPU time counters of ``/proc/stat`` (steal:
time a hypervisor gave this VM's CPUs to someone else), the compute processes on the
GPUs that are not this process or its children (NVML, where available) and the other
processes that used CPU over a short look (psutil). :func:`summarize` reads a run's
snapshots as one finding: ``elevated`` when the load exceeded the cores, steal reached
:data:`STEAL_ELEVATED`, another process computed on a GPU, or other processes together
used a full core; ``text`` says what was measured either way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from abgate.host import NvmlUnavailable, nvml
from abgate.records.load_snapshots import (
    BusyProcess,
    CpuTicks,
    GpuProcess,
    HostLoadFinding,
    HostSnapshot,
)

STEAL_ELEVATED = 0.05  # a twentieth of the CPU time taken by the hypervisor
BUSY_CPU_PERCENT = 50.0  # another process using half a core or more is listed
LOOK_S = 0.1  # how long the per-process CPU look lasts


def _cpu_ticks() -> CpuTicks | None:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu" or len(first) < 9:
        return None
    values = [int(v) for v in first[1:]]
    return CpuTicks(total=sum(values[:8]), steal=values[7])


def _own_pids() -> set[int]:
    me = psutil.Process()
    try:
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def _gpu_processes(own: set[int]) -> list[GpuProcess] | None:
    """Other compute processes per GPU; None where NVML cannot say."""
    try:
        with nvml() as (nv, handles):
            out = []
            for i, h in enumerate(handles):
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    if int(p.pid) not in own:
                        out.append(GpuProcess(gpu=i, pid=int(p.pid),
                                              used_memory=getattr(p, "usedGpuMemory", None)))
            return out
    except NvmlUnavailable:
        return None
    except Exception:  # an NVML call this driver does not support
        return None


def _busy_processes(own: set[int]) -> list[BusyProcess]:
    """Other processes with at least :data:`BUSY_CPU_PERCENT` of a core over a short
    look, busiest first (at most 5)."""
    procs = []
    for p in psutil.process_iter(["name"]):
        if p.pid in own:
            continue
        try:
            p.cpu_percent(None)
            procs.append(p)
        except psutil.Error:
            continue
    time.sleep(LOOK_S)
    busy = []
    for p in procs:
        try:
            pct = p.cpu_percent(None)
        except psutil.Error:
            continue
        if pct >= BUSY_CPU_PERCENT:
            busy.append(BusyProcess(pid=p.pid, name=p.info.get("name"), cpu_percent=pct))
    return sorted(busy, key=lambda b: -float(b.cpu_percent or 0.0))[:5]


def snapshot(label: str = "") -> HostSnapshot:
    """The host's load now (module doc); ``label`` says when (``"start"``, ``"end"``)."""
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    own = _own_pids()
    return HostSnapshot(label=label, at=time.time(), load_1min=load, cpus=os.cpu_count(),
                        cpu_ticks=_cpu_ticks(), gpu_processes=_gpu_processes(own),
                        busy_processes=_busy_processes(own))


def _steal(snaps: Sequence[HostSnapshot]) -> float | None:
    ticks = [s.cpu_ticks for s in snaps if s.cpu_ticks is not None]
    if len(ticks) < 2:
        return None
    total = ticks[-1].total - ticks[0].total
    return (ticks[-1].steal - ticks[0].steal) / total if total > 0 else None


def summarize(snaps: Sequence[HostSnapshot]) -> HostLoadFinding | None:
    """One finding over a run's snapshots (module doc), or None without any."""
    if not snaps:
        return None
    loads = [float(s.load_1min) for s in snaps if s.load_1min is not None]
    cpus = next((s.cpus for s in snaps if s.cpus is not None), None)
    load = max(loads) if loads else None
    steal = _steal(snaps)
    gpu_seen = [s.gpu_processes for s in snaps if s.gpu_processes is not None]
    gpu = sorted({int(p.pid) for ps in gpu_seen for p in ps if p.pid is not None})
    busy = [b for s in snaps for b in s.busy_processes or []]
    busy_core = max((sum(float(b.cpu_percent or 0.0) for b in s.busy_processes or [])
                     for s in snaps), default=0.0)
    reasons = []
    if load is not None and cpus and load > cpus:
        reasons.append(f"load {load:.1f} above {cpus} cores")
    if steal is not None and steal >= STEAL_ELEVATED:
        reasons.append(f"CPU steal {steal:.0%}")
    if gpu:
        reasons.append(f"{len(gpu)} other GPU process(es) (pid {', '.join(map(str, gpu))})")
    if busy_core >= 100.0:
        names = ", ".join(dict.fromkeys(str(b.name) for b in busy))
        reasons.append(f"other processes used {busy_core:.0f}% CPU ({names})")
    measured = [f"load {load:.1f}" + (f" on {cpus} cores" if cpus else "")
                if load is not None else "load unknown",
                f"steal {steal:.1%}" if steal is not None else "steal not measured",
                "GPU processes not measured" if not gpu_seen else
                f"{len(gpu)} other GPU process(es)"]
    return HostLoadFinding(elevated=bool(reasons), reasons=reasons, load_1min_max=load,
                           cpus=cpus, steal_fraction=steal, other_gpu_pids=gpu,
                           busy_cpu_percent=busy_core, snapshots=len(snaps),
                           text="; ".join(reasons) if reasons else ", ".join(measured))
