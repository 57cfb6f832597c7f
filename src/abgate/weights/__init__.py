"""Weight-level diagnostics: how far one checkpoint's tensors are from another's.

``diff_checkpoints(ref, other)`` matches tensors by name across two GGUF or safetensors
checkpoints and reports relative L2 error and SQNR per tensor, per layer and per kind
(see docs/weights-diff.md).
"""

from __future__ import annotations

from abgate.weights.diff import (
    SCHEMA,
    SCHEMA_VERSION,
    arm_diff_path,
    compare,
    describe,
    diff_arm_checkpoints,
    diff_checkpoints,
    write_diff,
)
from abgate.weights.metrics import ErrorStats, error_stats
from abgate.weights.names import KINDS, layer_index, tensor_kind
from abgate.weights.readers import Checkpoint, TensorInfo, open_checkpoint
from abgate.weights.result import TensorDiff, json_float, read_float

__all__ = [
    "KINDS", "SCHEMA", "SCHEMA_VERSION", "Checkpoint", "ErrorStats", "TensorDiff", "TensorInfo",
    "arm_diff_path", "compare", "describe", "diff_arm_checkpoints", "diff_checkpoints",
    "write_diff", "error_stats", "json_float", "layer_index",
    "open_checkpoint", "read_float", "tensor_kind",
]
