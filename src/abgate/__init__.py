"""abgate: matched quality+speed A/B verdicts and reproducible baselines for LLM engines.

The names below are imported on first use, so that ``import abgate.cli`` (the console
script) imports nothing heavy before it installs its signal handling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from abgate import launch_env as _launch_env  # noqa: F401  (the environment as launched)

if TYPE_CHECKING:
    from abgate.engines.base import (
        Capabilities,
        Engine,
        EngineInfo,
        GenerationRequest,
        GenerationResult,
        SamplingParams,
    )
    from abgate.errors import AbgateError, UsageError

    __version__: str

_LAZY = {"Capabilities": "abgate.engines.base", "Engine": "abgate.engines.base",
         "EngineInfo": "abgate.engines.base", "GenerationRequest": "abgate.engines.base",
         "GenerationResult": "abgate.engines.base", "SamplingParams": "abgate.engines.base",
         "AbgateError": "abgate.errors", "UsageError": "abgate.errors"}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("abgate")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    import importlib

    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'abgate' has no attribute {name!r}")
    globals()[name] = value
    return value


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
