"""The engine registry: a name maps to an :class:`~abgate.engines.base.Engine` subclass,
which carries what abgate asks before and at load as class attributes and
classmethods (``arg_specs``, ``resolve_model``, ``check_args``, ``check_options``,
``packages``, ``in_process``, ``load``).

Engines register by entry point, as lm-evaluation-harness's plug-ins do: group
``abgate.engines``, ``name = "module:Class"``, read with :mod:`importlib.metadata`, so
an out-of-tree engine package needs no edit of abgate. The built-in engines are named
in abgate's own ``pyproject.toml`` too, and also in :data:`BUILTIN`, so absent or stale
metadata (an editable install of another checkout) never loses them. A class is
imported only when its engine is looked up, so importing :mod:`abgate.engines`
imports no engine library. A bad plug-in (its name clashes with another engine, it
does not import, it is not an Engine) is a one-line error naming its distribution and
entry point when that engine is asked for (exit 2).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from dataclasses import dataclass

from abgate.engines.base import Engine
from abgate.errors import UsageError, did_you_mean

GROUP = "abgate.engines"
BUILTIN: dict[str, str] = {
    "llamacpp": "abgate.engines.llamacpp.engine:LlamaCppEngine",
    "openai": "abgate.engines.openai.engine:OpenAIEngine",
    "vllm": "abgate.engines.vllm.engine:VllmEngine",
    "transformers": "abgate.engines.transformers.engine:TransformersEngine",
    "fake": "abgate.engines.fake:FakeEngine",
}
BUILTIN_ORIGIN = "abgate (built-in)"


@dataclass(frozen=True)
class EngineSource:
    """Where engine ``name`` comes from: ``value`` (``module:Class``), ``origin`` (the
    distribution and version, or abgate's built-in), ``problem`` (why it cannot be
    used, e.g. a name clash), None when none."""

    name: str
    value: str
    origin: str
    problem: str | None = None

    def describe(self) -> str:
        return f"entry point {self.name} = {self.value} of {self.origin}"


_CLASSES: dict[str, type[Engine]] = {}


def _is_abgate(dist: md.Distribution | None) -> bool:
    return dist is not None and (dist.metadata["Name"] or "").lower() == "abgate"


def engine_sources() -> dict[str, EngineSource]:
    """Every engine by name: the built-ins, then each installed plug-in's entry point
    (abgate's own entry points are the built-ins and add nothing)."""
    out = {n: EngineSource(n, v, BUILTIN_ORIGIN) for n, v in BUILTIN.items()}
    for ep in md.entry_points(group=GROUP):
        if _is_abgate(ep.dist):
            continue
        dist = ep.dist
        origin = "an unknown distribution" if dist is None else \
            f"{dist.metadata['Name']} {dist.version}"
        source = EngineSource(ep.name, ep.value, origin)
        if ep.name in out:
            other = out[ep.name]
            source = EngineSource(ep.name, ep.value, origin,
                                  f"{source.describe()} clashes with the engine "
                                  f"{ep.name!r} of {other.origin}")
        out[ep.name] = source
    return out


def engine_names() -> list[str]:
    return list(engine_sources())


def engine_class(name: str) -> type[Engine]:
    """The engine class of ``name``, imported on first use; an unknown name is a
    one-line error naming the closest registered one."""
    cls = _CLASSES.get(name)
    if cls is not None:
        return cls
    sources = engine_sources()
    source = sources.get(name)
    if source is None:
        raise UsageError(f"unknown engine {name!r}; expected one of "
                         f"{', '.join(sources)}" + did_you_mean(name, sources))
    cls = _CLASSES[name] = _import(source)
    return cls


def _import(source: EngineSource) -> type[Engine]:
    if source.problem is not None:
        raise UsageError(f"engine {source.name!r}: {source.problem}")
    module_name, _, attr = source.value.partition(":")
    try:
        obj: object = importlib.import_module(module_name.strip())
        for part in attr.strip().split(".") if attr.strip() else ():
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - any failure of a plug-in's import is one line
        raise UsageError(f"engine {source.name!r}: {source.describe()} does not import "
                         f"({type(e).__name__}: {e})") from e
    if not (isinstance(obj, type) and issubclass(obj, Engine)):
        raise UsageError(f"engine {source.name!r}: {source.describe()} is not an "
                         "abgate.engines.base.Engine subclass")
    if obj.name != source.name:
        raise UsageError(f"engine {source.name!r}: {source.describe()} names itself "
                         f"{obj.name!r}")
    return obj
