"""What closing a transformers engine leaves: the compiled graphs reset, the CUDA cache
emptied, and the evidence that device memory came back."""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from typing import Any

from abgate.engines.shared import server_cleanup as srv
from abgate.engines.transformers.options import GPU_CONTEXT_TOLERANCE_BYTES


def compiled(models: Sequence[Any]) -> bool:
    """Whether any of ``models`` holds a compiled forward."""
    return any(getattr(m, "_compiled_call", None) is not None for m in models if m is not None)


def release(torch: Any, was_compiled: bool, on_cuda: bool, allocated_before: int,
            gpu_before: dict[str, Any]) -> dict[str, Any]:
    """Collect the (already dropped) models, reset compiled graphs, empty the CUDA cache;
    the cleanup evidence: the allocator and NVML's readings against the pre-load ones."""
    gc.collect()
    if was_compiled:
        torch._dynamo.reset()  # compiled graphs (and CUDA-graph pools) hold memory
        gc.collect()
    evidence: dict[str, Any] = {"kind": "in_process", "pid": os.getpid(), "survivors": [],
                                "compiled": was_compiled}
    allocator_back = True
    if on_cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        after = int(torch.cuda.memory_allocated())
        evidence.update(torch_allocated_before_bytes=allocated_before,
                        torch_allocated_bytes=after,
                        torch_reserved_bytes=int(torch.cuda.memory_reserved()))
        allocator_back = after <= allocated_before
    # NVML: the device's used memory within the context tolerance of the pre-load
    # reading (this process keeps its CUDA context: see GPU_CONTEXT_TOLERANCE_BYTES)
    evidence["gpu"] = srv.gpu_returned(gpu_before, wait_s=10.0,
                                       tolerance=GPU_CONTEXT_TOLERANCE_BYTES)
    evidence["verified"] = bool(evidence["gpu"].get("returned", True) and allocator_back)
    return evidence
