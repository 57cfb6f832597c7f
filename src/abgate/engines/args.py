"""``--engine-arg KEY=VALUE`` parsing: typed coercion and validation before any load.

Values are coerced from text once (``true``/``false``, ints including negative,
floats, ``null``/``none``, JSON objects and lists, otherwise the plain string), then
checked against the engine's declared :class:`ArgSpec` table. An unknown key names
the closest valid keys; a wrong type names the key and the expected type; friendly
names (``type_k=q8_0``) are mapped to the engine's codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from abgate.errors import UsageError, did_you_mean
from abgate.safejson import BadJson, parse

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def coerce_value(raw: str) -> Any:
    """Turn the text of a ``KEY=VALUE`` pair into a Python value."""
    text = raw.strip()
    low = text.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("null", "none"):
        return None
    if _INT.match(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts
            raise UsageError(f"value {_short(raw)}: integer too long") from None
    if _FLOAT.match(text):
        return float(text)
    if text and text[0] in "[{":
        try:
            return parse(text)
        except BadJson as exc:
            raise UsageError(f"value {_short(raw)} looks like JSON but does not parse: "
                             f"{exc.reason}") from None
    return raw


def _short(raw: str) -> str:
    return repr(raw) if len(raw) <= 60 else repr(raw[:57] + "...")


def parse_pairs(items: Iterable[str], flag: str, coerce: bool = True) -> dict[str, Any]:
    """Parse repeated ``KEY=VALUE`` flags. Later repeats of a key win."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{flag} {_short(item)}: expected KEY=VALUE")
        try:
            out[key] = coerce_value(value) if coerce else value
        except UsageError as exc:
            raise UsageError(f"{flag} {_short(key)}: {exc}") from None
    return out


_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "string", dict: "JSON object",
               list: "JSON list"}


@dataclass(frozen=True)
class ArgSpec:
    """One engine argument an adapter accepts.

    ``kind`` is the expected Python type; ``choices`` maps friendly names to the
    engine's codes (the value passed on). ``nullable`` allows ``null``.
    """

    name: str
    kind: type
    help: str = ""
    nullable: bool = False
    choices: Mapping[str, Any] = field(default_factory=dict)

    def expected(self) -> str:
        text = _TYPE_NAMES.get(self.kind, self.kind.__name__)
        if self.choices:
            text += " (one of " + ", ".join(sorted(self.choices)) + ")"
        return text + (" or null" if self.nullable else "")

    def resolve(self, value: Any) -> Any:
        """Check ``value`` and return what the engine should receive."""
        if value is None:
            if self.nullable:
                return None
            raise UsageError(f"engine arg {self.name!r} expects {self.expected()}, got null")
        if self.choices:
            if isinstance(value, str):
                key = value.lower()
                if key in self.choices:
                    return self.choices[key]
                raise UsageError(
                    f"engine arg {self.name!r}: unknown value {value!r}; expected {self.expected()}"
                    + did_you_mean(key, self.choices)
                )
            if isinstance(value, int) and not isinstance(value, bool) \
                    and value in set(self.choices.values()):
                return value
            raise UsageError(f"engine arg {self.name!r} expects {self.expected()}, got {value!r}")
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        ok = isinstance(value, self.kind)
        if self.kind is int and isinstance(value, bool):
            ok = False
        if not ok:
            got = _TYPE_NAMES.get(type(value), type(value).__name__)
            raise UsageError(
                f"engine arg {self.name!r} expects {self.expected()}, got {got} {value!r}"
            )
        return value


def validate_args(
    engine: str, args: Mapping[str, Any], specs: Mapping[str, ArgSpec]
) -> dict[str, Any]:
    """Validate every key and value; return the resolved arguments for the engine."""
    resolved: dict[str, Any] = {}
    for key, value in args.items():
        spec = specs.get(key)
        if spec is None:
            raise UsageError(
                f"unknown engine arg {key!r} for engine {engine!r}" + did_you_mean(key, specs)
            )
        resolved[key] = spec.resolve(value)
    return resolved
