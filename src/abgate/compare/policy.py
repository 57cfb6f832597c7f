"""Acceptance policies: the thresholds :func:`abgate.compare.verdict.decide` applies.

The shipped ``abgate/policies/default.toml`` is the single source of every default: a
user policy file is read on top of it and only needs the keys it changes. Every
problem is a one-line :class:`UsageError` naming ``file:line`` where it can be found:
TOML syntax errors, unknown keys or sections (with the closest valid name), wrong
types and out-of-range values.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from abgate.compare.paired import SPEED_METRICS
from abgate.errors import UsageError, did_you_mean

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
SHIPPED = ("default", "fast-path")


@dataclass(frozen=True)
class SpeedPolicy:
    metric: str
    min_speedup: float
    max_slowdown: float
    confidence: float


@dataclass(frozen=True)
class QualityPolicy:
    alpha: float
    max_accuracy_drop: float
    max_invalid_increase: float
    max_truncated_increase: float
    max_error_increase: float
    max_repetition_increase: float
    max_mean_kld: float
    min_top1_agreement: float


@dataclass(frozen=True)
class DiagnosticsPolicy:
    """Limits on output identity and length; ``decide = false`` makes identity, length
    and lossless-identity evidence reported only: it never rejects (nor accepts) alone."""

    min_identical_fraction: float | None = None
    max_mean_abs_length_change: float | None = None
    decide: bool = True


@dataclass(frozen=True)
class LosslessPolicy:
    """Limits for an experiment with ``expect = "lossless"`` (numerics must not change)."""

    max_divergent_fraction: float = 0.0
    max_mean_kld: float = 1e-4


@dataclass(frozen=True)
class SequentialPolicy:
    """The sequential (anytime-valid) gates, used when an A/B stops early
    (``[schedule] stopping = "sequential"``; :mod:`abgate.compare.sequential`)."""

    speed_burn_in: int = 10
    speed_opt_items: int = 20
    kld_clip: float = 0.5


@dataclass(frozen=True)
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
    lossless: LosslessPolicy = LosslessPolicy()
    sequential: SequentialPolicy = SequentialPolicy()

    def to_dict(self) -> dict[str, Any]:
        """The policy as recorded with a verdict (JSON-ready)."""
        return asdict(self)


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


_SCHEMA: dict[str, dict[str, Check]] = {
    "": {"name": _text, "description": _text, "min_items": _count, "power": _open_unit},
    "speed": {"metric": _metric, "min_speedup": _non_negative, "max_slowdown": _below_one,
              "confidence": _open_unit},
    "quality": {"alpha": _alpha, "max_accuracy_drop": _below_one,
                "max_invalid_increase": _below_one, "max_truncated_increase": _below_one,
                "max_error_increase": _below_one, "max_repetition_increase": _below_one,
                "max_mean_kld": _non_negative, "min_top1_agreement": _unit},
    "diagnostics": {"min_identical_fraction": _unit,
                    "max_mean_abs_length_change": _non_negative, "decide": _bool},
    "lossless": {"max_divergent_fraction": _unit, "max_mean_kld": _non_negative},
    "sequential": {"speed_burn_in": _count, "speed_opt_items": _positive_count,
                   "kld_clip": _positive},
}
_SECTIONS = tuple(name for name in _SCHEMA if name)


class _Source:
    """A policy file's text, to point errors at the line a key is on."""

    def __init__(self, label: str, text: str) -> None:
        self.label = label
        self.lines = text.splitlines()

    def line_of(self, key: str, section: str = "") -> int | None:
        header = re.compile(r"^\s*\[\s*([^\]]*?)\s*\]")
        assign = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
        current = ""
        for number, line in enumerate(self.lines, start=1):
            found = header.match(line)
            if found:
                current = found.group(1)
                if not section and current == key:
                    return number
            elif current == section and assign.match(line):
                return number
        return None

    def error(self, message: str, key: str | None = None, section: str = "") -> UsageError:
        line = self.line_of(key, section) if key else None
        where = f"{self.label}:{line}" if line else self.label
        return UsageError(f"policy {where}: {message}")


def _parse(source: _Source, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\(at line (\d+), column \d+\)", message)
        reason = message[: found.start()].strip() if found else message
        where = f"{source.label}:{found.group(1)}" if found else source.label
        raise UsageError(f"policy {where}: invalid TOML: {reason}") from None


def _check(source: _Source, data: Mapping[str, Any]) -> None:
    top = _SCHEMA[""]
    for key, value in data.items():
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise source.error(f"{key!r} must be a table ([{key}])", key)
            _check_section(source, key, value)
        elif key in top:
            problem = top[key](value)
            if problem:
                raise source.error(f"{key} {problem}, got {value!r}", key)
        else:
            raise source.error(f"unknown key {key!r}" + did_you_mean(key, [*top, *_SECTIONS]),
                               key)


def _check_section(source: _Source, section: str, table: Mapping[str, Any]) -> None:
    allowed = _SCHEMA[section]
    for key, value in table.items():
        name = f"{section}.{key}"
        if key not in allowed:
            raise source.error(f"unknown key {name!r}" + did_you_mean(key, allowed), key,
                               section)
        problem = allowed[key](value)
        if problem:
            raise source.error(f"{name} {problem}, got {value!r}", key, section)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = {key: dict(value) if isinstance(value, dict) else value
              for key, value in base.items()}
    for key, value in override.items():
        if isinstance(value, dict):
            merged.setdefault(key, {}).update(value)
        else:
            merged[key] = value
    return merged


def _read(path: Path) -> tuple[bytes, str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"policy file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise UsageError(f"cannot read policy {str(path)!r}: {exc.strerror}") from None
    try:
        return raw, raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"policy {path}: not UTF-8 text") from None


def _shipped_text(name: str = "default") -> str:
    return resources.files("abgate").joinpath(f"policies/{name}.toml").read_text("utf-8")


def shipped_name(path: str | Path) -> str | None:
    """The shipped policy ``path`` names (``fast-path``), unless a file of that name
    exists (a file always wins)."""
    text = str(path)
    return text if text in SHIPPED and not Path(text).exists() else None


def _check_decide(source: _Source, data: Mapping[str, Any]) -> None:
    diag = data.get("diagnostics") or {}
    if diag.get("decide") is False:
        limits = [k for k in ("min_identical_fraction", "max_mean_abs_length_change")
                  if k in diag]
        if limits:
            raise source.error(f"diagnostics.decide = false with a limit set "
                               f"({', '.join(limits)}): a limit that never decides is "
                               "meaningless; drop one of them", limits[0], "diagnostics")


def _diagnostics(diag: Mapping[str, Any]) -> DiagnosticsPolicy:
    limits = {k: float(v) for k, v in diag.items() if k != "decide"}
    return DiagnosticsPolicy(**limits, decide=bool(diag.get("decide", True)))


def _build(data: Mapping[str, Any], label: str, sha256: str) -> Policy:
    diag, speed = data.get("diagnostics", {}), data["speed"]
    return Policy(
        name=str(data["name"]),
        description=str(data["description"]),
        source=label,
        sha256=sha256,
        min_items=int(data["min_items"]),
        power=float(data["power"]),
        speed=SpeedPolicy(metric=str(speed["metric"]),
                          min_speedup=float(speed["min_speedup"]),
                          max_slowdown=float(speed["max_slowdown"]),
                          confidence=float(speed["confidence"])),
        quality=QualityPolicy(**{k: float(v) for k, v in data["quality"].items()}),
        diagnostics=_diagnostics(diag),
        lossless=LosslessPolicy(**{k: float(v) for k, v in data.get("lossless", {}).items()}),
        sequential=_sequential(data.get("sequential", {})),
    )


def _sequential(table: Mapping[str, Any]) -> SequentialPolicy:
    d = SequentialPolicy()
    return SequentialPolicy(speed_burn_in=int(table.get("speed_burn_in", d.speed_burn_in)),
                            speed_opt_items=int(table.get("speed_opt_items",
                                                          d.speed_opt_items)),
                            kld_clip=float(table.get("kld_clip", d.kld_clip)))


def load_policy(path: str | Path | None = None) -> Policy:
    """Read a policy file over the shipped default; ``None`` gives the default itself,
    a shipped name (``"fast-path"``) that shipped policy."""
    default_text = _shipped_text()
    default_source = _Source(DEFAULT_POLICY, default_text)
    defaults = _parse(default_source, default_text)
    _check(default_source, defaults)
    if path is None or shipped_name(path) == "default":
        digest = hashlib.sha256(default_text.encode("utf-8")).hexdigest()
        return _build(defaults, DEFAULT_POLICY, digest)
    name = shipped_name(path)
    if name is not None:
        text = _shipped_text(name)
        raw, label = text.encode("utf-8"), f"abgate:policies/{name}.toml"
    else:
        raw, text = _read(Path(path))
        label = str(path)
    source = _Source(label, text)
    data = _parse(source, text)
    _check(source, data)
    _check_decide(source, _merge(defaults, data))
    merged = _merge(defaults, data)
    if "name" not in data:
        merged["name"] = Path(path).stem
    if "description" not in data:
        merged["description"] = f"{defaults['name']} policy with changes from {Path(path).name}"
    return _build(merged, label, hashlib.sha256(raw).hexdigest())
