"""The ``engine`` section of a v2 record (run, A/B arm, bench, baseline): one
``--engine-arg`` in three named facets, written once each.

- ``given``: the engine args as the user wrote them (flags, an experiment's table;
  secrets redacted), set when the record is made;
- ``resolved``: the same args after the engine's arg specs typed them and filled
  defaults (``engines.args.validate_args``), set when the record is made;
- ``effective``: what the loaded engine reported (``describe().effective_config``),
  set at the load (absent before it).

Beside them: the engine's ``name`` (the requested one until the load, then the one it
reports), and, once loaded, its ``version``, ``model`` and ``capabilities``. Inspect's
``task_args`` / ``task_args_passed`` is the pattern: the facets are named, not copies.

A v1 record held the args in ``config.engine_args``, ``spec.engine_args``,
``spec.resolved_engine_args`` and ``engine.effective_config`` (four copies);
:func:`to_v2` is both the v1 -> v2 migration step and the shaping every writer applies to
a new record, so a v1 record read today and a record written today have one shape.
The spec digest still covers the v1-shaped spec (:func:`digested_spec`), so a v1
record's digest still matches the same run prepared today (``--resume``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abgate.records.sections import CapabilitiesRecord, EngineRecord, Section

# Where a v1 record held the engine args, and the facet each became.
V1_PLACES = {"config.engine_args": "given", "spec.engine_args": "given",
             "spec.resolved_engine_args": "resolved", "engine.effective_config": "effective"}


class EngineSection(Section):
    """A v2 record's ``engine``: the requested engine's three facets (module doc)."""

    name: str | None = None
    given: dict[str, Any] = {}
    resolved: dict[str, Any] = {}
    version: str | None = None
    model: str | None = None
    effective: dict[str, Any] | None = None  # None until the engine is loaded
    capabilities: CapabilitiesRecord | None = None

    @property
    def loaded(self) -> bool:
        """Whether an engine was loaded for this record (its facts are recorded)."""
        return self.effective is not None

    @property
    def effective_config(self) -> dict[str, Any]:
        """The effective facet ({} before the load)."""
        return dict(self.effective or {})

    def load(self, described: EngineRecord) -> None:
        """Record ``describe()`` (the session's typed ``EngineRecord``) as the loaded
        facts."""
        self.name, self.version, self.model = described.name, described.version, described.model
        self.effective = dict(described.effective_config)
        self.capabilities = described.capabilities.model_copy(deep=True)

    def described(self) -> EngineRecord | None:
        """The loaded facts as ``describe()`` gave them (None before the load)."""
        if not self.loaded:
            return None
        return EngineRecord(name=self.name or "", version=self.version, model=self.model,
                            effective_config=self.effective_config,
                            capabilities=self.capabilities or CapabilitiesRecord())


class LoadedEngine(Section):
    """An ``ab.json`` ``engines`` entry (v2): which engine an arm loaded (name, version,
    model, capabilities). Its facets, the effective one included, are in the arm's own
    ``run.json`` ``engine`` section, once."""

    name: str
    version: str | None = None
    model: str | None = None
    capabilities: CapabilitiesRecord | None = None

    @classmethod
    def of(cls, described: EngineRecord) -> LoadedEngine:
        """From ``describe()`` (the session's typed ``EngineRecord``), its effective config
        left to the arm's record."""
        return cls(name=described.name, version=described.version, model=described.model,
                   capabilities=described.capabilities.model_copy(deep=True),
                   **(described.model_extra or {}))


def _table(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def engine_section(spec: Mapping[str, Any], config: Mapping[str, Any],
                   engine: Mapping[str, Any] | None) -> dict[str, Any]:
    """The v2 ``engine`` object from a v1-shaped spec, config and loaded engine."""
    given = spec["engine_args"] if "engine_args" in spec else config.get("engine_args")
    out: dict[str, Any] = {"name": (engine or {}).get("name") or spec.get("engine"),
                           "given": _table(given),
                           "resolved": _table(spec.get("resolved_engine_args"))}
    if engine:
        loaded = dict(engine)
        out.update(version=loaded.pop("version", None), model=loaded.pop("model", None),
                   effective=_table(loaded.pop("effective_config", None)))
        if "capabilities" in loaded:
            out["capabilities"] = loaded.pop("capabilities")
        loaded.pop("name", None)
        out.update(loaded)  # a newer describe()'s own keys are kept
    return out


def to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A v1 record (or a new record's fields, v1-shaped) with its engine args moved into
    one ``engine`` section: ``config.engine_args``, ``spec.engine_args`` and
    ``spec.resolved_engine_args`` removed, ``engine.effective_config`` renamed
    ``engine.effective``."""
    spec, config = doc.get("spec"), doc.get("config")
    if not isinstance(spec, Mapping):
        return doc  # not a spec record: the validator names what is missing
    config = _table(config)
    engine = doc.get("engine")
    if isinstance(engine, Section):
        engine = engine.to_dict()
    section = engine_section(spec, config, engine if isinstance(engine, Mapping) else None)
    new_spec = {k: v for k, v in spec.items()
                if k not in ("engine_args", "resolved_engine_args")}
    new_config = {k: v for k, v in config.items() if k != "engine_args"}
    out = dict(doc)
    out.update(config=new_config, spec=new_spec, engine=section)
    return out


def digested_spec(spec: Mapping[str, Any], engine: EngineSection) -> dict[str, Any]:
    """The spec as its digest covers it (the v1 shape: the given and resolved facets as
    ``engine_args`` and ``resolved_engine_args``; a digest sorts the keys), for comparing
    a recorded spec with one prepared now."""
    return {**spec, "engine_args": dict(engine.given),
            "resolved_engine_args": dict(engine.resolved)}


def given_config(config: Mapping[str, Any], engine: EngineSection) -> dict[str, Any]:
    """A record's config as it was given (``engine_args`` from the given facet), for
    reading it back into a config model (``--resume``, a baseline's bench config)."""
    out = dict(config)
    if "engine_args" not in out:
        out["engine_args"] = dict(engine.given)
    return out


def ab_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A v1 ``ab.json`` (or a new one's fields) without its copies of the arms' engine
    facets: ``engines.ARM.effective_config`` and ``experiment_resolved.arms.ARM.engine_args``
    removed (each arm's ``run.json`` ``engine`` section holds them). ``experiment`` (as
    given, what ``--resume``'s digest covers) and ``differences`` are kept as they are."""
    out = dict(doc)
    engines = doc.get("engines")
    if isinstance(engines, Mapping):
        out["engines"] = {arm: {k: v for k, v in e.items() if k != "effective_config"}
                          if isinstance(e, Mapping) else e for arm, e in engines.items()}
    resolved = doc.get("experiment_resolved")
    if isinstance(resolved, Mapping) and isinstance(resolved.get("arms"), Mapping):
        arms = {arm: {k: v for k, v in c.items() if k != "engine_args"}
                if isinstance(c, Mapping) else c for arm, c in resolved["arms"].items()}
        out["experiment_resolved"] = {**resolved, "arms": arms}
    return out
