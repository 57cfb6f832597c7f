"""Acceptance policies: the thresholds :func:`abgate.compare.verdict.decide` applies.

The shipped ``abgate/policies/default.toml`` is the single source of every default: a
user policy file is read on top of it and only needs the keys it changes. Every
problem is a one-line :class:`UsageError` naming ``file:line`` where it can be found:
TOML syntax errors, unknown keys or sections (with the closest valid name), wrong
types and out-of-range values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic.dataclasses import dataclass

from abgate.compare.paired import SPEED_METRICS
from abgate.errors import UsageError, did_you_mean
from abgate.schema import FORBID, Style, checked, validated
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


# A check returns None when the value is fine, else what it must be.
Check = Callable[[Any], str | None]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _count(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 2
    return None if ok else "must be an integer >= 2"


def _open_unit(value: Any) -> str | None:
    return None if _is_number(value) and 0 < value < 1 else "must be a number in (0, 1)"


def _alpha(value: Any) -> str | None:
    return None if _is_number(value) and 0 < value < 0.5 else "must be a number in (0, 0.5)"


def _non_negative(value: Any) -> str | None:
    return None if _is_number(value) and value >= 0 else "must be a number >= 0"


def _speedup(value: Any) -> str | None:
    ok = _is_number(value) and value > -1
    return None if ok else "must be a number > -1 (negative: a tolerated slowdown)"


def _below_one(value: Any) -> str | None:
    return None if _is_number(value) and 0 <= value < 1 else "must be a number in [0, 1)"


def _positive_count(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "must be an integer >= 1"


def _positive(value: Any) -> str | None:
    return None if _is_number(value) and value > 0 else "must be a number > 0"


def _unit(value: Any) -> str | None:
    return None if _is_number(value) and 0 <= value <= 1 else "must be a number in [0, 1]"


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _metric(value: Any) -> str | None:
    if isinstance(value, str) and value in SPEED_METRICS:
        return None
    hint = did_you_mean(value, SPEED_METRICS) if isinstance(value, str) else ""
    return "must be one of " + ", ".join(repr(m) for m in SPEED_METRICS) + hint



Text = Annotated[str, checked(_text)]
Count = Annotated[int, checked(_count)]
PositiveCount = Annotated[int, checked(_positive_count)]
OpenUnit = Annotated[float, checked(_open_unit)]
Alpha = Annotated[float, checked(_alpha)]
NonNegative = Annotated[float, checked(_non_negative)]
BelowOne = Annotated[float, checked(_below_one)]
Speedup = Annotated[float, checked(_speedup)]
Positive = Annotated[float, checked(_positive)]
Unit = Annotated[float, checked(_unit)]
Flag = Annotated[bool, checked(_bool)]
Metric = Annotated[str, checked(_metric)]


@dataclass(frozen=True, config=FORBID)
class SpeedPolicy:
    """``min_speedup`` < 0 is a non-inferiority margin: B passes when its speed is shown
    to be no slower than ``-min_speedup`` (the ``no-slower`` policy)."""

    metric: Metric
    min_speedup: Speedup
    max_slowdown: BelowOne
    confidence: OpenUnit


@dataclass(frozen=True, config=FORBID)
class QualityPolicy:
    alpha: Alpha
    max_accuracy_drop: BelowOne
    max_invalid_increase: BelowOne
    max_truncated_increase: BelowOne
    max_error_increase: BelowOne
    max_repetition_increase: BelowOne
    max_mean_kld: NonNegative
    min_top1_agreement: Unit


@dataclass(frozen=True, config=FORBID)
class DiagnosticsPolicy:
    """Limits on output identity and length; ``decide = false`` makes identity, length
    and lossless-identity evidence reported only: it never rejects (nor accepts) alone."""

    min_identical_fraction: Unit | None = None
    max_mean_abs_length_change: NonNegative | None = None
    decide: Flag = True


@dataclass(frozen=True, config=FORBID)
class LosslessPolicy:
    """Limits for an experiment with ``expect = "lossless"`` (numerics must not change)."""

    max_divergent_fraction: Unit = 0.0
    max_mean_kld: NonNegative = 1e-4


@dataclass(frozen=True, config=FORBID)
class SequentialPolicy:
    """The sequential (anytime-valid) gates, used when an A/B stops early
    (``[schedule] stopping = "sequential"``; :mod:`abgate.compare.sequential`)."""

    speed_burn_in: Count = 10
    speed_opt_items: PositiveCount = 20
    kld_clip: Positive = 0.5


@dataclass(frozen=True, config=FORBID)
class Policy:
    """A parsed policy; ``source`` is the file it came from, ``sha256`` its bytes' hash."""

    name: str
    description: str
    source: str
    sha256: str
    min_items: int
    power: float
    speed: SpeedPolicy
    quality: QualityPolicy
    diagnostics: DiagnosticsPolicy
    lossless: LosslessPolicy = field(default_factory=LosslessPolicy)
    sequential: SequentialPolicy = field(default_factory=SequentialPolicy)

    def to_dict(self) -> dict[str, Any]:
        """The policy as recorded with a verdict (JSON-ready)."""
        return asdict(self)


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


def _shipped_text(name: str = "default") -> str:
    return resources.files("abgate").joinpath(f"policies/{name}.toml").read_text("utf-8")


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
    default = parse_toml(_shipped_text(), DEFAULT_POLICY, prefix="policy ")
    if path is None or shipped_name(path) == "default":
        return _build(_checked(default, default.data), DEFAULT_POLICY,
                      hashlib.sha256(default.raw).hexdigest())
    name = shipped_name(path)
    if name is not None:
        doc = parse_toml(_shipped_text(name), f"abgate:policies/{name}.toml",
                         prefix="policy ")
    else:
        doc = read_toml(Path(path), "file", prefix="policy ")
    merged = _merge(default.data, doc.data)
    if "name" not in doc.data:
        merged["name"] = Path(path).stem
    if "description" not in doc.data:
        merged["description"] = (f"{default.data['name']} policy with changes from "
                                 f"{Path(path).name}")
    return _build(_checked(doc, merged), doc.label, hashlib.sha256(doc.raw).hexdigest())
