"""The engine registry: each engine is a typed :class:`EngineAdapter` (what the rest of
abgate may ask of an engine before and at load), made by a factory registered with
``@engine("name")`` that imports the adapter's module only when the engine is asked
for (as inspect_ai's model providers do), so importing :mod:`abgate.engines` imports
no engine library, and mypy sees every adapter's ``load`` returning an
:class:`~abgate.engines.base.Engine`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from abgate.engines.args import ArgSpec
from abgate.engines.base import Engine
from abgate.errors import UsageError, did_you_mean


class Loader(Protocol):
    def __call__(self, model: str, args: Mapping[str, Any],
                 options: Mapping[str, Any] | None = None,
                 run_dir: Path | None = None) -> Engine: ...


def _no_cross_checks(args: Mapping[str, Any]) -> None:
    """The default ``check_args``: an engine without cross-argument rules."""


@dataclass(frozen=True)
class EngineAdapter:
    """One engine as the runner sees it before anything loads.

    ``arg_specs``: what ``--engine-arg`` accepts; ``resolve_model``: checks the model
    (exit 2 before any load); ``load(model, args, options, run_dir)``: the resident
    engine (``options`` are engine-level settings that are not engine args, such as
    endpoints or concurrency; ``run_dir`` is where the engine may keep logs);
    ``check_args``: cross-argument rules, still before load; ``check_options``: the
    engine's options, None for an engine that takes none; ``in_process``: it runs in
    abgate's process (two arms of an A/B may then be interleaved in one process);
    ``requires``: the importable packages it needs, checked before load."""

    name: str
    arg_specs: Mapping[str, ArgSpec]
    resolve_model: Callable[[str | None], str]
    load: Loader
    check_args: Callable[[Mapping[str, Any]], None] = _no_cross_checks
    check_options: Callable[[Mapping[str, Any]], object] | None = None
    in_process: bool = False
    requires: tuple[tuple[str, str], ...] = ()  # (import name, install hint)

    def validate_options(self, options: Mapping[str, Any]) -> None:
        if self.check_options is not None:
            self.check_options(options)
        elif options:
            raise UsageError(f"engine {self.name!r} takes no engine options "
                             f"(got {', '.join(options)})")

    def check_packages(self) -> None:
        """Refuse in one line, before any load, when a package the engine needs is not
        installed (a module already imported, e.g. a test's stand-in, counts)."""
        for module, hint in self.requires:
            if module in sys.modules:
                continue
            if importlib.util.find_spec(module) is None:
                raise UsageError(f"engine {self.name!r} needs the package {module!r}: {hint}")


Factory = Callable[[], EngineAdapter]
_FACTORIES: dict[str, Factory] = {}
_ADAPTERS: dict[str, EngineAdapter] = {}


def engine(name: str) -> Callable[[Factory], Factory]:
    """Register ``factory`` as engine ``name``; it runs (importing the adapter's module)
    the first time that engine is looked up."""
    def register(factory: Factory) -> Factory:
        if name in _FACTORIES:
            raise ValueError(f"engine {name!r} registered twice")
        _FACTORIES[name] = factory
        return factory
    return register


def engine_names() -> list[str]:
    return list(_FACTORIES)


def engine_adapter(name: str) -> EngineAdapter:
    """The adapter of engine ``name``; an unknown name is a one-line error naming the
    closest registered one."""
    adapter = _ADAPTERS.get(name)
    if adapter is not None:
        return adapter
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UsageError(f"unknown engine {name!r}; expected one of "
                         f"{', '.join(_FACTORIES)}" + did_you_mean(name, _FACTORIES))
    adapter = _ADAPTERS[name] = factory()
    return adapter
