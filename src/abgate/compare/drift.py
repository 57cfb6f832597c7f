"""Configuration drift between an accepted record and the current one: "exact match
except ...".

:func:`configuration` flattens what a record document (``baseline.json``, a run's or a
bench's ``run.json``, an A/B arm's) says about how it ran into dotted keys, in named
classes:

| class | from the record |
| --- | --- |
| ``env.NAME`` | the environment snapshot's variables, with the ``--env`` overrides |
| ``engine_args.KEY`` / ``engine_options.KEY`` | what was requested |
| ``effective.KEY`` | the engine's effective configuration after load |
| ``engine.name`` / ``engine.version`` | the engine as loaded |
| ``library.NAME`` | the installed package versions of the environment snapshot |
| ``mapped.FILE`` | the SHA-256 of each shared library the engine's processes mapped |
| ``model.KEY`` | the model's identity (path, size, SHA-256) |
| ``host.KEY`` | the host (hostname, OS, Python, CPU, cores, memory, GPUs) |

:func:`drift` compares two such views. An allow-list of patterns (``host.*``,
``env.CUDA_VISIBLE_DEVICES``; shell-style, each starting with a class name) says which
keys may differ; any other difference is *unexplained*, and a check that uses the
result fails naming those keys. The facts of one server launch (:data:`PER_LAUNCH`: its
port, log path, readiness time) are listed as not compared. A list of objects (the host's
GPUs) is flattened by position: ``host.gpus.0.memory_used``; a pattern also matches the
keys below it (``host.gpus`` allows every ``host.gpus.*`` key).

*Volatile* figures (:data:`VOLATILE`: GPU memory in use or free, a profiler's KV-cache
block counts such as vLLM's ``num_gpu_blocks``, load averages) move between two loads of
the same build on the same kind of machine. They are listed apart (``volatile``), with
both values, and are no drift unless ``strict_volatile`` asks for them to be compared
like any other key. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from abgate.compare.views import Objects, View, views
from abgate.errors import UsageError, did_you_mean

CLASSES = ("env", "engine_args", "engine_options", "effective", "engine", "library",
           "mapped", "model", "host")
# Facts of one launch, not configuration: a launched server's free port (in its endpoint
# URL and its filled command line; the requested command is engine_options.launch), the
# log path in the run directory and the measured readiness time. Listed, not compared.
PER_LAUNCH = ("effective.endpoints", "effective.endpoints.*", "effective.launch",
              "effective.server_log", "effective.server_ready_s")
# Figures that differ between two loads of one build (what the GPU holds when the
# snapshot is taken, what a memory profiler computed from it, the host's load): the one
# list of them. Shown in a check's output, compared only with strict_volatile.
VOLATILE = ("host.gpus.*.memory_used", "host.gpus.*.memory_free", "host.memory_available",
            "host.load_*", "host.ram_available*", "effective.num_gpu_blocks",
            "effective.num_cpu_blocks", "effective.kv_cache_memory*",
            "effective.available_kv_cache_memory*", "effective.gpu_memory_used*",
            "effective.load_seconds")  # how long the load took (transformers)
_MISSING = "<absent>"


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    elif isinstance(value, list) and value and all(
            isinstance(v, Mapping) and v for v in value):  # the host's GPUs, by position
        for i, v in enumerate(value):
            _flat(f"{prefix}.{i}", v, out)
    else:
        out[prefix] = value


class _Lib(View):
    path: Any = None
    sha256: Any = None


class _Process(View):
    libs: Objects = []


class _Environment(View):
    env: Any = None
    packages: Any = None


class _Provenance(View):
    environment: _Environment = Field(default_factory=_Environment)
    libraries: Objects = []


class _Spec(View):
    env: Any = None
    engine_args: Any = None
    engine_options: Any = None
    model: Any = None


class _Engine(View):
    name: Any = None
    version: Any = None
    effective_config: Any = None


class _Recorded(View):
    """What :func:`configuration` reads of a record document (of any version)."""

    spec: _Spec = Field(default_factory=_Spec)
    engine: _Engine = Field(default_factory=_Engine)
    provenance: _Provenance = Field(default_factory=_Provenance)
    host: Any = None


def _mapped(provenance: _Provenance) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for proc in views(_Process, provenance.libraries):
        for lib in views(_Lib, proc.libs):
            if lib.path:
                out[str(lib.path).rsplit("/", 1)[-1]] = lib.sha256
    return out


def configuration(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc``'s configuration as flat ``class.key`` entries (module doc)."""
    found = _Recorded.model_validate(doc)
    spec, engine, provenance = found.spec, found.engine, found.provenance
    environment = provenance.environment
    parts: dict[str, Any] = {
        "env": {**(environment.env or {}), **(spec.env or {})},
        "engine_args": spec.engine_args or {}, "engine_options": spec.engine_options or {},
        "effective": engine.effective_config or {},
        "engine": {"name": engine.name, "version": engine.version},
        "library": environment.packages or {}, "mapped": _mapped(provenance),
        "model": spec.model or {}, "host": found.host or {},
    }
    out: dict[str, Any] = {}
    for cls, value in parts.items():
        if isinstance(value, Mapping):
            for k, v in value.items():
                _flat(f"{cls}.{k}", v, out)
        else:
            out[cls] = value
    return out


def parse_allow(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``--allow-diff 'host.*,env.CUDA_VISIBLE_DEVICES'`` (repeatable): patterns that
    each start with a known class, else a UsageError naming the pattern."""
    items = [text] if isinstance(text, str) else list(text or [])
    patterns = tuple(p.strip() for item in items for p in item.split(",") if p.strip())
    for p in patterns:
        cls = p.split(".", 1)[0]
        if cls not in CLASSES and cls != "*":
            raise UsageError(f"--allow-diff {p!r}: unknown class {cls!r}"
                             f"{did_you_mean(cls, CLASSES)}; classes: {', '.join(CLASSES)}")
    return patterns


def matches(key: str, patterns: Sequence[str]) -> bool:
    """``key`` matches a pattern, or lies below one (``host.gpus`` covers
    ``host.gpus.0.name``)."""
    return any(fnmatch.fnmatchcase(key, p) or key.startswith(p + ".") for p in patterns)


def volatile(key: str) -> bool:
    """A figure that moves between two loads of one build (:data:`VOLATILE`)."""
    return matches(key, VOLATILE)


@dataclass(frozen=True)
class Difference:
    key: str
    recorded: Any
    current: Any
    allowed: bool


@dataclass
class Drift:
    allow: tuple[str, ...]
    differences: list[Difference] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    volatile: list[Difference] = field(default_factory=list)  # not drift (VOLATILE)
    strict_volatile: bool = False

    @property
    def unexplained(self) -> list[str]:
        return [d.key for d in self.differences if not d.allowed]

    @property
    def passed(self) -> bool:
        return not self.unexplained

    @property
    def summary(self) -> str:
        if not self.differences:
            return "exact match" + self._volatile_note
        allowed = [d.key for d in self.differences if d.allowed]
        text = "exact match except " + _keys(allowed) + " (allowed)" if allowed else ""
        if self.unexplained:
            text = (text + "; " if text else "") + "differs beyond --allow-diff: " + _keys(
                self.unexplained)
        return text + self._volatile_note

    @property
    def _volatile_note(self) -> str:
        if not self.volatile:
            return ""
        return ("; volatile figures differ, not compared (--strict-volatile compares "
                "them): " + _keys([d.key for d in self.volatile]))

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary, "allow": list(self.allow),
                "unexplained": self.unexplained,
                "differences": [asdict(d) for d in self.differences],
                "not_compared": self.not_compared,
                "volatile": [asdict(d) for d in self.volatile],
                "strict_volatile": self.strict_volatile}


def _keys(keys: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def _same(a: Any, b: Any) -> bool:
    return bool(json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                          default=str))


def drift(recorded: Mapping[str, Any], current: Mapping[str, Any],
          allow: Sequence[str] = (), *, strict_volatile: bool = False) -> Drift:
    """Every key whose value differs (or exists on one side only), allowed or not; a
    volatile one (:data:`VOLATILE`) apart, unless ``strict_volatile``."""
    out = Drift(tuple(allow), strict_volatile=strict_volatile)
    for key in sorted(recorded.keys() | current.keys()):
        if any(fnmatch.fnmatchcase(key, p) for p in PER_LAUNCH):
            out.not_compared.append(key)
            continue
        a, b = recorded.get(key, _MISSING), current.get(key, _MISSING)
        if _same(a, b):
            continue
        ok = matches(key, allow)
        if volatile(key) and not strict_volatile:
            out.volatile.append(Difference(key, a, b, True))
        else:
            out.differences.append(Difference(key, a, b, ok))
    return out
