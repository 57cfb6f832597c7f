"""abgate: matched quality+speed A/B verdicts and reproducible baselines for LLM engines."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("abgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from abgate.engines.base import (
    Capabilities,
    Engine,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from abgate.errors import AbgateError, UsageError

__all__ = [
    "AbgateError",
    "Capabilities",
    "Engine",
    "EngineInfo",
    "GenerationRequest",
    "GenerationResult",
    "SamplingParams",
    "UsageError",
    "__version__",
]
