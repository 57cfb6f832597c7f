"""Configuration drift between an accepted record and the current one: "exact match
except ...".

:func:`configuration` flattens what a record document (``baseline.json``, a run's or a
bench's ``run.json``, an A/B arm's; v1 or v2) says about how it ran into dotted keys of
the one fact vocabulary (``records.facts.CLASSES``):

| class | from the record |
| --- | --- |
| ``env.NAME`` | the environment snapshot's variables, with the ``--env`` overrides |
| ``engine_args.KEY`` / ``engine_options.KEY`` | what was requested (the given facet) |
| ``effective.KEY`` | the engine's effective configuration after load (the effective facet) |
| ``engine`` / ``engine_version`` | the engine as loaded |
| ``package.NAME`` | the installed Python package versions of the environment snapshot |
| ``library.FILE`` | the SHA-256 of each shared library the engine's processes mapped |
| ``model.KEY`` | the model's identity (path, size, SHA-256) |
| ``host.KEY`` | the host (hostname, OS, Python, CPU, cores, memory, GPUs) |

:func:`drift` compares two such views. An allow-list of patterns (``host.*``,
``env.CUDA_VISIBLE_DEVICES``; shell-style, each starting with a class name) says which
keys may differ; any other difference is *unexplained*, and a check that uses the
result fails naming those keys. The facts of one server launch
(``records.facts.PER_LAUNCH``) are listed as not compared; a pattern also matches the
keys below it (``host.gpus`` allows every ``host.gpus.*`` key): the one matcher,
``records.facts.matches``.

*Volatile* figures (``records.facts.VOLATILE``: GPU memory in use or free, a profiler's
KV-cache block counts, load averages) move between two loads of the same build on the
same kind of machine. They are listed apart (``volatile``), with both values, and are no
drift unless ``strict_volatile`` asks for them to be compared like any other key. Pure:
no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from abgate.compare.views import Objects, View, views
from abgate.errors import UsageError, did_you_mean
from abgate.records import facts
from abgate.records.facts import matches, volatile
from abgate.records.sections import Section

__all__ = ["matches", "volatile"]  # the one matcher (records/facts.py)
_MISSING = "<absent>"


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
    """A record's ``engine``: v2's facets (``given``, ``effective``) or v1's
    ``effective_config`` (its args then in the spec)."""

    name: Any = None
    version: Any = None
    given: Any = None
    effective: Any = None
    effective_config: Any = None


class _Recorded(View):
    """What :func:`configuration` reads of a record document (of any version)."""

    spec: _Spec = Field(default_factory=_Spec)
    engine: _Engine = Field(default_factory=_Engine)
    provenance: _Provenance = Field(default_factory=_Provenance)
    host: Any = None


def _mapped(provenance: _Provenance) -> dict[str, Any]:
    return facts.libraries((str(lib.path), str(lib.sha256) if lib.sha256 else None)
                           for proc in views(_Process, provenance.libraries)
                           for lib in views(_Lib, proc.libs) if lib.path)


def configuration(doc: Mapping[str, Any] | Section, **added: Any) -> dict[str, Any]:
    """``doc``'s configuration (a record model, or a record document as JSON) as flat
    ``class.key`` entries (module doc); ``added``: top-level parts added to it (the
    spec and host of a load that has no record, beside its ``LoadFacts``)."""
    data = doc.to_dict() if isinstance(doc, Section) else doc
    found = _Recorded.model_validate({**data, **added} if added else data)
    spec, engine, provenance = found.spec, found.engine, found.provenance
    environment = provenance.environment
    parts: dict[str, Any] = {
        "env": {**(environment.env or {}), **(spec.env or {})},
        "engine_args": spec.engine_args or engine.given or {},
        "engine_options": spec.engine_options or {},
        "effective": engine.effective or engine.effective_config or {},
        "engine": engine.name, "engine_version": engine.version,
        "package": environment.packages or {}, "library": _mapped(provenance),
        "model": spec.model or {}, "host": found.host or {},
    }
    out: dict[str, Any] = {}
    for cls, value in parts.items():
        if isinstance(value, Mapping):
            for k, v in value.items():
                facts.flat(f"{cls}.{k}", v, out)
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
        if cls not in facts.CLASSES and cls != "*":
            raise UsageError(f"--allow-diff {p!r}: unknown class {cls!r}"
                             f"{did_you_mean(cls, list(facts.CLASSES))}; classes: "
                             f"{', '.join(facts.CLASSES)}")
    return patterns


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
    volatile one (``records.facts.VOLATILE``) apart, unless ``strict_volatile``."""
    out = Drift(tuple(allow), strict_volatile=strict_volatile)
    for key in sorted(recorded.keys() | current.keys()):
        if facts.per_launch(key):
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
