"""The reads of a JSON document before any model can read it, in one place: what the
document says of itself (:class:`Stamp`: its ``schema``, ``schema_version``, ``kind``
and its seal's version), which chooses the model, the migration steps and the refusal
of a newer version; and the v1 -> v2 steps of the record documents, transforms of the
raw v1 dict (``docs/records.md``).

A v1 record held the engine args in ``config.engine_args``, ``spec.engine_args``,
``spec.resolved_engine_args`` and ``engine.effective_config`` (four copies);
:func:`to_v2` moves them into one ``engine`` section (:class:`~abgate.records.engine.
EngineSection`). It is both the v1 -> v2 migration step and the shaping every writer
applies to a new record's fields (given v1-shaped), so a v1 record read today and a
record written today have one shape. :func:`ab_to_v2` drops an ``ab.json``'s copies of
the arms' engine facets.

``tests/tools/key_reads.py`` counts this module's string-key reads apart ("stamps and
v1 migrations"): they read abgate's records, but raw, before the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from abgate.integrity import FIELD as SEAL
from abgate.records.sections import Section


@dataclass(frozen=True)
class Stamp:
    """What a JSON document says of itself, as written (any JSON value, unchecked):
    its ``schema`` (a manifest's), ``schema_version``, ``kind`` (a record's) and
    ``integrity`` (a sealed record's seal)."""

    schema: Any
    schema_version: Any
    kind: Any
    seal: Any

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Stamp:
        return cls(doc.get("schema"), doc.get("schema_version"), doc.get("kind"),
                   doc.get(SEAL))

    @property
    def version(self) -> int | None:
        """``schema_version`` when it is an integer (not a bool), else None."""
        v = self.schema_version
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def seal_version(self) -> int | None:
        """The seal's version (1: a seal written before seals had one); None when the
        document has no seal object."""
        seal = self.seal
        return seal.get("version", 1) if isinstance(seal, dict) else None


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
