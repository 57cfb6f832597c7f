"""The stand-in's ``EngineArgs``: the fields abgate's tests pass."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class EngineArgs:
    model: str = ""
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    seed: int | None = 0
    enable_prefix_caching: bool | None = None
    max_model_len: int | None = None
