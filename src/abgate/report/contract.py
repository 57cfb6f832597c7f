"""The matched contract of an A/B: what every arm held equal and what differed.

Each arm is described by *facets* (model + SHA, engine, suite, items, seeds, sampling,
prompt) from its ``run.json`` spec, falling back to the experiment's arm config, plus
its engine args (the given facet), engine options, env and the engine's effective
configuration (the effective facet) from the arm's ``run.json``; keys of one launch
(``records.facts.PER_LAUNCH``) are not compared. A facet with one value across arms was
held equal; any other differed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from abgate.records import facts
from abgate.records.documents import ExperimentArm
from abgate.records.engine import LoadedEngine
from abgate.records.sections import ModelRef, PromptSpec, Spec
from abgate.report.fmt import NA, short, value_text
from abgate.report.load import AbData
from abgate.report.untrusted import user

MISSING = facts.MISSING
_PLURAL = {"engine arg": "engine args", "engine option": "engine options", "env": "env"}


@dataclass(frozen=True)
class ContractView:
    equal: tuple[tuple[str, str], ...]  # (facet, value)
    differs: tuple[tuple[str, tuple[str, ...]], ...]  # (facet, value per arm, in arm order)
    n_effective_equal: int

    def to_dict(self, arms: list[str]) -> dict[str, Any]:
        return {
            "held_equal": dict(self.equal),
            "differed": {facet: dict(zip(arms, values, strict=True))
                         for facet, values in self.differs},
            "effective_config_keys_equal": self.n_effective_equal,
        }


def _spec(data: AbData, arm: str) -> Spec:
    """The arm's spec (``run.json``); empty for an arm that never wrote one."""
    record = data.arms[arm].record
    return record.spec if record is not None else Spec()


def _config(data: AbData, arm: str) -> ExperimentArm:
    """The arm's configuration as the experiment recorded it (an empty one when the
    experiment has no such arm)."""
    return data.arm_config(arm)


def _model(spec: Spec, config: ExperimentArm, engine: LoadedEngine | None) -> str:
    model = spec.model or ModelRef()
    path = model.path or (engine.model if engine else None) or config.model
    if not isinstance(path, str):
        return NA
    name = PurePath(path).name or path
    shown = user(name)
    return f"`{shown}` (sha256 {short(model.sha256)})" if model.sha256 else f"`{shown}`"


def _items(spec: Spec, config: ExperimentArm) -> str:
    ids = spec.item_ids
    if ids is None:
        limit = config.limit
        return f"first {limit} items" if limit is not None else NA
    digest = hashlib.sha256("\n".join(map(str, ids)).encode()).hexdigest()
    available = spec.suite.n_available if spec.suite else None
    of = f" of {available}" if available is not None else ""
    span = f" ({user(ids[0])} … {user(ids[-1])})" if ids else ""
    return f"{len(ids)}{of}{span}; id list sha256 {digest[:12]}"


def _suite(spec: Spec, config: ExperimentArm) -> str:
    suite = spec.suite
    if suite is None:
        return value_text(config.suite if "suite" in config.model_fields_set else NA)
    text = f"{user(suite.name or NA)} ({user(suite.source or NA)})"
    if suite.data_sha256 is not None:
        text += f", data sha256 {short(suite.data_sha256)}"
    return text


def _sampling(spec: Spec, config: ExperimentArm) -> str:
    sampling = spec.sampling
    if sampling is None:
        sampling = config.sampling()
    return ", ".join(f"{user(k)}={value_text(v)}" for k, v in sampling.items()) or NA


def _prompt(spec: Spec, config: ExperimentArm) -> str:
    prompt = spec.prompt or PromptSpec(shots=config.shots, shots_file=config.shots_file,
                                       system=config.system)
    parts = []
    if prompt.version is not None:
        parts.append(f"template {user(prompt.version)}")
    parts.append(f"{prompt.shots or 0} shots")
    if prompt.shots_file:
        parts.append(f"shots file {value_text(prompt.shots_file)}")
    parts.append("system prompt " + (f"sha256 {_sha(prompt.system)}" if prompt.system
                                     else "none"))
    if prompt.instruction is not None:
        parts.append(f"instruction sha256 {_sha(prompt.instruction)}")
    return ", ".join(parts)


def _sha(text: Any) -> str:
    return hashlib.sha256(str(text).encode()).hexdigest()[:12]


def _facets(data: AbData, arm: str) -> dict[str, str]:
    spec, config = _spec(data, arm), _config(data, arm)
    engine = data.record.engines.get(arm)
    name = spec.engine or config.engine or (engine.name if engine else None) or NA
    version = engine.version if engine else None
    seeds = spec.seeds if spec.seeds is not None else config.seeds
    return {
        "model": _model(spec, config, engine),
        "engine": user(f"{name} {version}" if version else name),
        "suite": _suite(spec, config),
        "items": _items(spec, config),
        "seeds": value_text(seeds) if seeds is not None else NA,
        "sampling": _sampling(spec, config),
        "prompt": _prompt(spec, config),
    }


def _settings(data: AbData, arm: str) -> dict[str, dict[str, Any]]:
    spec, config = _spec(data, arm), _config(data, arm)
    record = data.arms[arm].record
    # The args as the user wrote them (the given facet: resolved values may be enum
    # codes); the effective configuration shows what the engine made of them.
    given = spec.model_fields_set  # a spec's own group, else the experiment's config
    groups = {
        label: getattr(spec if key in given else config, key)
        for label, key in (("engine option", "engine_options"), ("env", "env"))}
    groups = {"engine arg": record.engine.given if record is not None
              else config.engine_args, **groups}
    return {group: dict(values) if isinstance(values, Mapping) else {}
            for group, values in groups.items()}


def _effective(data: AbData, arm: str) -> dict[str, Any]:
    record = data.arms[arm].record  # the effective facet, in the arm's run.json
    config = record.engine.effective_config if record is not None else {}
    return {k: v for k, v in config.items() if not facts.per_launch(f"effective.{k}")}


def _split(per_arm: list[Mapping[str, Any]], label: str
           ) -> tuple[list[str], list[tuple[str, tuple[str, ...]]]]:
    """Keys with one value in every arm (``k=v`` texts) and rows for the other keys."""
    keys = sorted({k for values in per_arm for k in values})
    same, differ = [], []
    for key in keys:
        values = tuple(value_text(v[key]) if key in v else MISSING for v in per_arm)
        if len(set(values)) == 1:
            same.append(f"{user(key)}={values[0]}")
        else:
            differ.append((f"{label} `{user(key)}`", values))
    return same, differ


def matched_contract(data: AbData) -> ContractView:
    arms = list(data.arms)
    facets = [_facets(data, arm) for arm in arms]
    equal: list[tuple[str, str]] = []
    differs: list[tuple[str, tuple[str, ...]]] = []
    for facet in facets[0]:
        values = tuple(f[facet] for f in facets)
        if len(set(values)) == 1:
            equal.append((facet, values[0]))
        else:
            differs.append((facet, values))
    settings = [_settings(data, arm) for arm in arms]
    for group in settings[0]:
        same, rows = _split([s[group] for s in settings], group)
        if same:
            equal.append((_PLURAL[group] + " (every arm)", ", ".join(same)))
        differs.extend(rows)
    same, rows = _split([_effective(data, arm) for arm in arms], "effective")
    differs.extend(rows)
    if same:
        equal.append(("effective config (every arm)", ", ".join(same)))
    return ContractView(tuple(equal), tuple(differs), len(same))
