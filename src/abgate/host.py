"""What machine and source tree produced a result: CPU, cores, RAM, GPUs, git state."""

from __future__ import annotations

import os
import platform
import subprocess
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


def gpus() -> list[dict[str, Any]]:
    """NVIDIA GPUs through NVML (nvidia-ml-py), or an empty list where there are none."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVML raises its own error types
        return []
    try:
        out = []
        driver = pynvml.nvmlSystemGetDriverVersion()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({"index": i, "name": pynvml.nvmlDeviceGetName(h),
                        "memory_total": int(mem.total), "memory_used": int(mem.used),
                        "driver": driver})
        return out
    finally:
        pynvml.nvmlShutdown()


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


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state(cwd: Path | None = None) -> dict[str, Any] | None:
    """Commit, tree hash and dirty flag of the working directory's git checkout."""
    where = cwd or Path.cwd()
    commit = _git(["rev-parse", "HEAD"], where)
    if commit is None:
        return None
    status = _git(["status", "--porcelain", "--untracked-files=no"], where)
    return {"commit": commit, "tree": _git(["rev-parse", "HEAD^{tree}"], where),
            "dirty": bool(status), "root": _git(["rev-parse", "--show-toplevel"], where)}
