"""Acceptance policies: the thresholds :func:`abgate.compare.verdict.decide` applies.

The shipped ``abgate/policies/default.toml`` is the single source of every default: a
user policy file is read on top of it and only needs the keys it changes. Every
problem is a one-line :class:`UsageError` naming ``file:line`` where it can be found:
TOML syntax errors, unknown keys or sections (with the closest valid name), wrong
types and out-of-range values. The policy read is the record model
:class:`abgate.records.policy.Policy` (re-exported here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic.dataclasses import dataclass

from abgate.errors import UsageError
from abgate.records.policy import (
    Count,
    DiagnosticsPolicy,
    LosslessPolicy,
    OpenUnit,
    Policy,
    QualityPolicy,
    SequentialPolicy,
    SpeedPolicy,
    Text,
)
from abgate.schema import FORBID, Style, validated
from abgate.tomlfile import TomlDoc, parse_toml, read_toml

__all__ = [
    "DEFAULT_POLICY",
    "DiagnosticsPolicy",
    "LosslessPolicy",
    "Policy",
    "QualityPolicy",
    "SequentialPolicy",
    "SpeedPolicy",
    "load_policy",
]

DEFAULT_POLICY = "abgate:policies/default.toml"
# Policies shipped with abgate, by name (``--policy fast-path``): abgate/policies/NAME.toml.
SHIPPED = ("default", "fast-path", "no-slower", "pre-merge")


@dataclass(frozen=True, config=FORBID)
class PolicyFile:
    """A policy file's keys, merged over the shipped default (so every key is there)."""

    name: Text
    description: Text
    min_items: Count
    power: OpenUnit
    speed: SpeedPolicy
    quality: QualityPolicy
    diagnostics: DiagnosticsPolicy = field(default_factory=DiagnosticsPolicy)
    lossless: LosslessPolicy = field(default_factory=LosslessPolicy)
    sequential: SequentialPolicy = field(default_factory=SequentialPolicy)


POLICY = Style(dotted=True, prefix="policy ")


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = {key: dict(value) if isinstance(value, dict) else value
              for key, value in base.items()}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key, {}), dict):
            merged.setdefault(key, {}).update(value)
        else:
            merged[key] = value
    return merged


def _checked(doc: TomlDoc, data: Mapping[str, Any]) -> PolicyFile:
    """``data`` (``doc``'s keys, merged over the default) as a policy: a bad key or value
    is a one-line UsageError naming ``doc``'s file, line and the dotted key."""
    _check_decide(doc, data)
    return validated(PolicyFile, data, doc.label, doc=doc, style=POLICY)


def _shipped(name: str = "default") -> TomlDoc:
    """The shipped policy ``name`` (``abgate:policies/NAME.toml``), parsed."""
    text = resources.files("abgate").joinpath(f"policies/{name}.toml").read_text("utf-8")
    return parse_toml(text, f"abgate:policies/{name}.toml", prefix="policy ")


def shipped_name(path: str | Path) -> str | None:
    """The shipped policy ``path`` names (``fast-path``), unless a file of that name
    exists (a file always wins)."""
    text = str(path)
    return text if text in SHIPPED and not Path(text).exists() else None


def _check_decide(doc: TomlDoc, data: Mapping[str, Any]) -> None:
    diag = data.get("diagnostics") or {}
    if isinstance(diag, Mapping) and diag.get("decide") is False:
        limits = [k for k in ("min_identical_fraction", "max_mean_abs_length_change")
                  if k in diag]
        if limits:
            raise UsageError(f"policy {doc.where(('diagnostics', limits[0]))}: "
                             f"diagnostics.decide = false with a limit set "
                             f"({', '.join(limits)}): a limit that never decides is "
                             "meaningless; drop one of them")


def _build(f: PolicyFile, label: str, sha256: str) -> Policy:
    return Policy(name=f.name, description=f.description, source=label, sha256=sha256,
                  min_items=f.min_items, power=f.power, speed=f.speed, quality=f.quality,
                  diagnostics=f.diagnostics, lossless=f.lossless, sequential=f.sequential)


def load_policy(path: str | Path | None = None) -> Policy:
    """Read a policy file over the shipped default; ``None`` gives the default itself,
    a shipped name (``"fast-path"``) that shipped policy."""
    default = _shipped()
    if path is None or shipped_name(path) == "default":
        return _build(_checked(default, default.data), DEFAULT_POLICY,
                      hashlib.sha256(default.raw).hexdigest())
    name = shipped_name(path)
    doc = _shipped(name) if name is not None else read_toml(Path(path), "file", prefix="policy ")
    merged = _merge(default.data, doc.data)
    if "name" not in doc.data:
        merged["name"] = Path(path).stem
    if "description" not in doc.data:
        merged["description"] = (f"{default.data['name']} policy with changes from "
                                 f"{Path(path).name}")
    return _build(_checked(doc, merged), doc.label, hashlib.sha256(doc.raw).hexdigest())
