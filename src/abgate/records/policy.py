"""The acceptance policy a verdict was given under, one model from the policy file to
``comparison.json``: :class:`Policy` (its name, file, hash and every threshold) and its
sections, each value checked as the file gives it (``compare.policy.PolicyFile`` reads a
file through the same types). :func:`abgate.compare.verdict.decide` applies it, the
verdict and ``comparison.json`` record it (written as its fields, in their order) and the
report reads it back by attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Annotated, Any

from pydantic.dataclasses import dataclass

from abgate.errors import did_you_mean
from abgate.schema import FORBID, checked

__all__ = [
    "SPEED_METRICS",
    "DiagnosticsPolicy",
    "LosslessPolicy",
    "Policy",
    "QualityPolicy",
    "SequentialPolicy",
    "SpeedPolicy",
]

# The speed metrics a policy may gate on, and the direction that is better (+1 higher).
SPEED_METRICS: dict[str, int] = {"steady_decode_tps": 1, "prefill_tps": 1, "ttft_s": -1}


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
