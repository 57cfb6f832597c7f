"""Small, total formatting helpers: every function accepts ``None`` (or a wrong type) and
prints ``n/a`` instead of failing, because reports read records other code wrote."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from abgate.report.untrusted import user

NA = "n/a"


def as_float(value: Any) -> float | None:
    """A finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def num(value: Any, spec: str = ".1f") -> str:
    x = as_float(value)
    return NA if x is None else format(x, spec)


def pct(value: Any, digits: int = 1) -> str:
    """0.123 -> ``12.3%``."""
    x = as_float(value)
    return NA if x is None else f"{100.0 * x:.{digits}f}%"


def signed_pct(value: Any, digits: int = 1) -> str:
    """0.05 -> ``+5.0%``."""
    x = as_float(value)
    return NA if x is None else f"{100.0 * x:+.{digits}f}%"


def pt(value: Any, digits: int = 1) -> str:
    """A difference of two rates in percentage points: 0.012 -> ``+1.2 pt``."""
    x = as_float(value)
    return NA if x is None else f"{100.0 * x:+.{digits}f} pt"


def ms(seconds: Any) -> str:
    x = as_float(seconds)
    return NA if x is None else f"{1000.0 * x:.1f}"


def interval(ci: Any, show: Any = num) -> str:
    """``[low, high]`` with ``show`` applied to each end; n/a when either end is missing."""
    ends = (list(ci) if isinstance(ci, list | tuple) else []) + [None, None]
    low, high = ends[0], ends[1]
    if as_float(low) is None or as_float(high) is None:
        return NA
    return f"{show(low)} to {show(high)}"


def utc(timestamp: Any) -> str:
    x = as_float(timestamp)
    if x is None:
        return NA
    return datetime.fromtimestamp(x, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: Any) -> str:
    x = as_float(seconds)
    if x is None or x < 0:
        return NA
    whole = int(round(x))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def short(value: Any, n: int = 12) -> str:
    """A record's text cut to ``n`` characters (untrusted: ``untrusted.user``)."""
    return user(value[:n]) if isinstance(value, str) and value else NA


def value_text(value: Any, limit: int = 80) -> str:
    """A config value as a person reads it: ``true``, ``unset``, ``q8_0``, ``[0, 1]``;
    untrusted text (``untrusted.user``): it came from a record."""
    return user(_value_text(value, limit))


def _value_text(value: Any, limit: int) -> str:
    if value is None:
        text = "unset"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value if value else '""'
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(_value_text(v, limit) for v in value) + "]"
    elif isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k}: {_value_text(v, limit)}" for k, v in value.items()) + "}"
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rate(value: Any) -> str:
    """A rate that is usually 0 or small: ``0%`` / ``2.5%``."""
    x = as_float(value)
    if x is None:
        return NA
    return "0%" if x == 0 else pct(x)
