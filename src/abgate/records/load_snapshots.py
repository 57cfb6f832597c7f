"""The host's load as recorded (``abgate.host_load``): one snapshot taken at the start or
end of an arm, block or baseline run (:class:`HostSnapshot`), the finding over a run's
snapshots (:class:`HostLoadFinding`, in ``comparison.json`` and ``baseline.json``), and
the two sections that hold them (``ab.json``'s :class:`AbHostLoad`, ``baseline.json``'s
:class:`BaselineHostLoad`). Fields in the order they are written."""

from __future__ import annotations

from abgate.records.sections import Number, Section

__all__ = ["AbHostLoad", "BaselineHostLoad", "BusyProcess", "CpuTicks", "GpuProcess",
           "HostLoadCheck", "HostLoadFinding", "HostSnapshot"]


class CpuTicks(Section):
    """``/proc/stat``'s CPU time counters: the total and the steal."""

    total: int
    steal: int


class GpuProcess(Section):
    """A compute process on a GPU that is not abgate's (NVML)."""

    gpu: int | None = None
    pid: int | None = None
    used_memory: int | None = None


class BusyProcess(Section):
    """Another process that used at least half a core over a short look (psutil)."""

    pid: int | None = None
    name: str | None = None
    cpu_percent: Number | None = None


class HostSnapshot(Section):
    """``abgate.host_load.snapshot``: the host's load at one moment, ``label`` says when."""

    label: str | None = None
    at: Number | None = None
    load_1min: Number | None = None
    cpus: int | None = None
    cpu_ticks: CpuTicks | None = None
    gpu_processes: list[GpuProcess] | None = None  # None: NVML could not say
    busy_processes: list[BusyProcess] | None = None


class HostLoadFinding(Section):
    """``abgate.host_load.summarize``: one finding over a run's snapshots."""

    elevated: bool = False
    reasons: list[str] = []
    load_1min_max: Number | None = None
    cpus: int | None = None
    steal_fraction: Number | None = None
    other_gpu_pids: list[int] = []
    busy_cpu_percent: Number | None = None
    snapshots: int | None = None
    text: str | None = None


class AbHostLoad(Section):
    """``ab.json``'s ``host_load``: the snapshots at the start and end of the interleaved
    run or of each block."""

    snapshots: list[HostSnapshot] = []


class BaselineHostLoad(Section):
    """``baseline.json``'s ``host_load`` (and a check's, ``current``): the snapshots
    before and after the cases and their finding."""

    before: HostSnapshot | None = None
    after: HostSnapshot | None = None
    summary: HostLoadFinding | None = None


class HostLoadCheck(Section):
    """``abgate baseline check``'s ``host_load``: the baseline's as recorded and the
    check's own."""

    recorded: BaselineHostLoad | None = None
    current: BaselineHostLoad | None = None
