"""``deterministic=true`` for the ``transformers`` engine: torch's deterministic algorithms
for every request of this engine, and on CUDA cuBLAS's fixed workspace
(``CUBLAS_WORKSPACE_CONFIG=:4096:8``, which cuBLAS reads when it creates a handle, so it
must be in the environment before this process first uses CUDA).

torch's switch is process-wide; the engine sets it to its own value around each
``generate`` / ``score`` call and restores it after, so two arms resident in one process
(an interleaved A/B) each run with their own setting. The cuBLAS variable is
process-wide too: the engine sets it where it is unset and CUDA has not started yet,
and otherwise refuses to load rather than claim a determinism it cannot give."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from abgate.errors import UsageError

CUBLAS_VAR = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_FIXED = (":4096:8", ":16:8")  # the two values cuBLAS documents as deterministic


def prepare(torch: Any, wanted: bool, on_cuda: bool) -> None:
    """Before CUDA starts: with ``deterministic=true`` on CUDA, put cuBLAS's fixed
    workspace in the environment (or refuse if it is too late to)."""
    if not (wanted and on_cuda):
        return
    value = os.environ.get(CUBLAS_VAR)
    if value in CUBLAS_FIXED:
        return
    if value is None and not torch.cuda.is_initialized():
        os.environ[CUBLAS_VAR] = CUBLAS_FIXED[0]
        return
    why = (f"it is {value!r}" if value is not None else
           "it is unset and CUDA has already started in this process")
    raise UsageError(f"engine arg deterministic=true needs {CUBLAS_VAR}=:4096:8 before CUDA "
                     f"starts, but {why}; export it (or --env {CUBLAS_VAR}=:4096:8)")


def facts(torch: Any, wanted: bool, on_cuda: bool) -> dict[str, Any]:
    """What describe() records."""
    return {"deterministic": wanted,
            "cublas_workspace_config": os.environ.get(CUBLAS_VAR) if on_cuda else None}


@contextmanager
def scope(torch: Any, wanted: bool) -> Iterator[None]:
    """torch's deterministic algorithms set to this engine's value for one call."""
    before = bool(torch.are_deterministic_algorithms_enabled())
    if before != wanted:
        torch.use_deterministic_algorithms(wanted)
    try:
        yield
    finally:
        if before != wanted:
            torch.use_deterministic_algorithms(before)
