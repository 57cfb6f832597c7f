"""What machine produced a result: CPU, cores, RAM, GPUs (the source tree's git facts are
:func:`abgate.provenance.gitinfo.git_state`, shared with manifests)."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why."""


@contextmanager
def nvml() -> Iterator[tuple[Any, list[Any]]]:
    """``(pynvml, device handles)`` with NVML initialised for the block (the one place
    abgate starts and stops NVML). Raises NvmlUnavailable where it cannot."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("pynvml (nvidia-ml-py) is not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver / no GPU: NVML raises its own error types
        raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
    try:
        yield pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def gpus() -> list[dict[str, Any]]:
    """NVIDIA GPUs through NVML (nvidia-ml-py), or an empty list where there are none."""
    try:
        with nvml() as (nv, handles):
            driver = nv.nvmlSystemGetDriverVersion()
            out = []
            for i, h in enumerate(handles):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                out.append({"index": i, "name": nv.nvmlDeviceGetName(h),
                            "memory_total": int(mem.total), "memory_used": int(mem.used),
                            "driver": driver})
            return out
    except NvmlUnavailable:
        return []


def gpu_models(gpus: list[dict[str, Any]]) -> list[str]:
    """The distinct model names of ``gpus`` (:func:`gpus`' facts), sorted."""
    return sorted({str(g.get("name")) for g in gpus})


def gpu_drivers(gpus: list[dict[str, Any]]) -> list[str]:
    """The distinct driver versions of ``gpus`` (:func:`gpus`' facts), sorted."""
    return sorted({str(g.get("driver")) for g in gpus if g.get("driver")})


def gpu_uuids() -> dict[str, str]:
    """NVML index (as a string, as Ray's GPU ids are) -> the GPU's UUID; empty without NVML."""
    try:
        with nvml() as (nv, handles):
            return {str(i): str(nv.nvmlDeviceGetUUID(h)) for i, h in enumerate(handles)}
    except NvmlUnavailable:
        return {}


def host_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": gpus(),
    }
