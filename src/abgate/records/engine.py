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
``spec.resolved_engine_args`` and ``engine.effective_config`` (four copies); the v1 -> v2
step that moves them here (``to_v2``, also the shaping every writer applies to a new
record) is in :mod:`abgate.records.migrations`, with the other reads of a raw document.
The spec digest still covers the v1-shaped spec (:func:`digested_spec`), so a v1
record's digest still matches the same run prepared today (``--resume``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abgate.records.migrations import ab_to_v2 as ab_to_v2
from abgate.records.migrations import to_v2 as to_v2
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
