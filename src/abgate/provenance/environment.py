"""A cheap snapshot of the machine and software a run or manifest was made with.

Nothing here imports torch (or any heavy package): versions come from package
metadata, and CUDA details from torch only when torch is already imported. GPU
facts come from NVML (``nvidia-ml-py``) when importable, else ``nvidia-smi`` when
installed, else they are recorded as absent. Static facts are gathered once per
process; environment variables are read on every call.
"""

from __future__ import annotations

import copy
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import metadata
from typing import Any

from abgate import __version__
from abgate.redact import REDACTED, is_secret_name, redact_text

KEY_PACKAGES = (
    "abgate", "llama-cpp-python", "torch", "vllm", "sglang", "transformers", "tokenizers",
    "safetensors", "gguf", "numpy", "scipy", "triton", "flash-attn", "nvidia-ml-py",
)
ENV_PREFIXES = (
    "CUDA_", "NCCL_", "OMP_", "MKL_", "OPENBLAS_", "GGML_", "LLAMA_", "VLLM_", "HF_",
    "TORCH_", "PYTORCH_", "TOKENIZERS_", "LD_", "NVSHMEM_",
)


def package_versions(names: Iterable[str] = KEY_PACKAGES) -> dict[str, str]:
    """Installed versions of the named distributions (missing ones are left out)."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_from_nvml() -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no device: NVML raises its own error classes
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append({"name": _text(pynvml.nvmlDeviceGetName(handle)),
                            "memory_bytes": int(mem.total)})
        return {"source": "nvml", "driver": _text(driver),
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}", "devices": devices}
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu_from_smi() -> dict[str, Any] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = "--query-gpu=name,driver_version,memory.total"
    try:
        proc = subprocess.run([smi, query, "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    devices, driver = [], None
    for line in proc.stdout.strip().splitlines():
        name, driver, mem = (part.strip() for part in line.split(",", 2))
        devices.append({"name": name, "memory_bytes": int(float(mem)) * (1 << 20)})
    return {"source": "nvidia-smi", "driver": driver, "cuda_driver": None, "devices": devices}


def _torch_details() -> dict[str, Any] | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    version = getattr(torch, "version", None)
    return {"version": str(getattr(torch, "__version__", "")),
            "cuda": getattr(version, "cuda", None), "hip": getattr(version, "hip", None)}


@lru_cache(maxsize=1)
def static_environment() -> dict[str, Any]:
    """Facts that do not change while the process lives (gathered once)."""
    gpu = _gpu_from_nvml() or _gpu_from_smi()
    uname = platform.uname()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "packages": package_versions(),
        "os": {"system": uname.system, "release": uname.release,
               "platform": platform.platform(), "libc": " ".join(platform.libc_ver())},
        "cpu": {"model": _cpu_model(), "machine": uname.machine,
                "logical_cores": os.cpu_count() or 0, "usable_cores": usable},
        "gpu": gpu,
    }


def selected_env(names: Iterable[str] = (), environ: Mapping[str, str] | None = None,
                 prefixes: Iterable[str] = ENV_PREFIXES) -> dict[str, str | None]:
    """Env vars worth recording: ``names`` (None when unset) plus any set var with a
    known prefix. Values of secret names (``HF_TOKEN``, ``OPENAI_API_KEY``, ...; see
    :func:`abgate.redact.is_secret_name`) are recorded as ``<redacted>``, never by value;
    secret-shaped parts of other values (``hf_...``, ``http://user:pass@``) too."""
    env = os.environ if environ is None else environ
    wanted = tuple(prefixes)
    out: dict[str, str | None] = {k: v for k, v in env.items() if k.startswith(wanted)}
    for name in names:
        out[name] = env.get(name)
    return {k: (v if v is None else REDACTED if is_secret_name(k) else redact_text(v))
            for k, v in sorted(out.items())}


def environment_snapshot(env_vars: Iterable[str] = ()) -> dict[str, Any]:
    """Python, packages, OS, CPU, GPU/driver, torch/CUDA (if loaded) and selected env vars.

    Cheap after the first call in a process (static parts are cached), so a runner
    can embed it in every run record.
    """
    snap = copy.deepcopy(static_environment())
    snap["abgate"] = __version__
    snap["torch"] = _torch_details()
    snap["env"] = selected_env(env_vars)
    return snap
