"""Engines behind one protocol, registered lazily by name.

An engine module provides ``ARG_SPECS`` (what ``--engine-arg`` accepts),
``resolve_model(model)`` (checks the model before anything loads) and
``load(model, args, options=None, run_dir=None)`` (returns a resident
:class:`~abgate.engines.base.Engine`; ``options`` are engine-level settings that are not
engine args, such as endpoints or concurrency; ``run_dir`` is where the engine may keep
logs, e.g. a launched server's).
Importing :mod:`abgate.engines` imports no engine library.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from abgate.errors import UsageError, did_you_mean

ENGINES: dict[str, str] = {
    "llamacpp": "abgate.engines.llamacpp",
    "openai": "abgate.engines.openai_compat",
    "vllm": "abgate.engines.vllm",
    "transformers": "abgate.engines.transformers",
}


def engine_module(name: str) -> ModuleType:
    target = ENGINES.get(name)
    if target is None:
        raise UsageError(f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}"
                         + did_you_mean(name, ENGINES))
    return importlib.import_module(target)
