"""NVLink multicast stays off: the one place that says how.

A program that uses NVLink multicast (NCCL's NVLS algorithms, PyTorch's symmetric-memory
multimem operations, NVSHMEM's NVLS) can put a shared host's GPUs out of service, so
abgate turns it off in every process it starts for a GPU engine: every server it
launches (``--launch``, whatever the server: the variables are harmless where nothing
reads them) and the in-process vLLM engine (its EngineCore and every tensor- or
pipeline-parallel worker inherit them from the load). It is always on, not only when
``tensor_parallel_size`` or ``pipeline_parallel_size`` is above 1: a TP1 arm and a TP2
arm of one A/B then differ only in the declared switch, and a single-GPU engine that
starts NCCL for another reason is covered too.

The values are forced: an inherited value that would turn multicast on is overridden in
the engine's processes, and ``--env`` that would turn it on is refused before anything
loads (:func:`check_env`). The engine's ``process_env`` carries the values, so the run's
environment snapshot (taken under the engine's env) records them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from abgate.errors import UsageError

MULTICAST_OFF: Mapping[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def check_env(env: Mapping[str, str]) -> None:
    """Refuse env overrides (``--env``, an arm's ``env``) that would turn multicast on."""
    for name, off in MULTICAST_OFF.items():
        if name in env and str(env[name]) != off:
            raise UsageError(f"--env {name}={env[name]}: abgate keeps NVLink multicast off "
                             f"in every engine process ({name}={off}; docs/servers.md, "
                             "\"NVLink multicast\")")


def server_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with multicast forced off: the environment of a launched server."""
    return {**base, **MULTICAST_OFF}


@contextlib.contextmanager
def applied_env(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in ``os.environ`` for the block; every key restored afterwards (the
    runner's engine env and :func:`multicast_off` both go through here)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def multicast_off() -> contextlib.AbstractContextManager[None]:
    """Multicast off in this process's environment for the block: an in-process engine
    that starts its workers there (they inherit it)."""
    return applied_env(MULTICAST_OFF)
