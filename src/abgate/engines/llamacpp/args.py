"""What ``--engine-arg`` accepts for the llama.cpp engine: every ``Llama`` keyword
abgate passes through, typed (the KV cache types by name), abgate's own switches for
the engine, and the defaults a load starts from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from abgate.engines.args import ArgSpec

# ggml_type codes for the KV cache (stable in ggml's enum).
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
              "iq4_nl": 20, "bf16": 30}
GGML_NAMES = {v: k for k, v in GGML_TYPES.items()}

_SPECS = [
    ArgSpec("n_ctx", int, "context length in tokens"),
    ArgSpec("n_batch", int, "logical batch size for prompt processing"),
    ArgSpec("n_ubatch", int, "physical batch size"),
    ArgSpec("n_threads", int, "threads for generation", nullable=True),
    ArgSpec("n_threads_batch", int, "threads for prompt processing", nullable=True),
    ArgSpec("n_gpu_layers", int, "layers offloaded to the GPU (-1: all)"),
    ArgSpec("main_gpu", int, "GPU used for the model"),
    ArgSpec("split_mode", int, "how to split the model across GPUs"),
    ArgSpec("tensor_split", list, "fraction of the model on each GPU", nullable=True),
    ArgSpec("flash_attn", bool, "use flash attention"),
    ArgSpec("type_k", int, "KV cache type for K", nullable=True, choices=GGML_TYPES),
    ArgSpec("type_v", int, "KV cache type for V", nullable=True, choices=GGML_TYPES),
    ArgSpec("offload_kqv", bool, "offload the KV cache to the GPU"),
    ArgSpec("op_offload", bool, "offload host tensor operations to the device", nullable=True),
    ArgSpec("swa_full", bool, "full-size sliding-window-attention cache", nullable=True),
    ArgSpec("use_mmap", bool, "memory-map the model file"),
    ArgSpec("use_mlock", bool, "lock the model in RAM"),
    ArgSpec("kv_overrides", dict, "GGUF metadata overrides", nullable=True),
    ArgSpec("rope_freq_base", float, "RoPE base frequency (0: from model)"),
    ArgSpec("rope_freq_scale", float, "RoPE frequency scale (0: from model)"),
    ArgSpec("lora_path", str, "LoRA adapter file", nullable=True),
    ArgSpec("lora_scale", float, "LoRA scale"),
    ArgSpec("numa", bool, "NUMA optimisations"),
    ArgSpec("seed", int, "context RNG seed (per-request seeds still apply)"),
    ArgSpec("no_perf", bool, "disable llama.cpp's internal timers"),
    # abgate's own switches for this engine (not passed to Llama):
    ArgSpec("prefix_cache", bool, "reuse the KV cache across requests sharing a prefix"),
    ArgSpec("use_extra_bufts", bool, "llama.cpp's extra weight buffer types (AMX, CPU "
            "repacks); unset: off where the CPU advertises AMX (see extra_bufts)",
            nullable=True),
]
ARG_SPECS: Mapping[str, ArgSpec] = {s.name: s for s in _SPECS}
ADAPTER_ONLY = {"prefix_cache", "use_extra_bufts"}


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


DEFAULTS: Mapping[str, Any] = {"n_ctx": 4096, "seed": 0, "prefix_cache": False}


def amx_advertised(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU advertises AMX tiles (``amx_tile`` among its flags)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


def extra_bufts(value: bool | None) -> bool:
    """llama.cpp's ``use_extra_bufts`` for a load: as given, else off on a CPU that
    advertises AMX. Seen (2026-12-03, a Firecracker VM on an AMX Xeon, llama-cpp-python
    0.3.36 built natively): the AMX weight buffer's first matmul dies of a general
    protection fault (SIGSEGV: the whole process, a Ray worker included), although the
    kernel grants the AMX permission; with the extra buffers off the same build decodes.
    ``--engine-arg use_extra_bufts=true`` turns them back on where AMX works."""
    return (not amx_advertised()) if value is None else bool(value)
