"""Parse a contract TOML file into a :class:`Contract`, with one-line usage errors.

Every problem names the file and, where it can be found, the line: TOML syntax errors
(tomllib reports the line), unknown keys (with the closest valid key), wrong types,
and a name both required and forbidden.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate.errors import UsageError, did_you_mean
from abgate.provenance.libmaps import MODES
from abgate.redact import redact_env
from abgate.tomlfile import read_toml

_TOP_KEYS = ("name", "engine", "description", "settings", "every_rank", "engine_args", "env",
             "libraries")
_SECTION_KEYS = {
    "engine_args": ("required", "forbidden"),
    "env": ("required", "forbidden"),
    "libraries": ("required", "mode", "roles", "ranks"),
}


@dataclass(frozen=True)
class Contract:
    """A parsed contract. ``present_*`` names must be given/set with any value."""

    path: str
    sha256: str
    name: str | None = None
    engine: str | None = None
    description: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    every_rank: Mapping[str, Any] = field(default_factory=dict)  # per-rank facts, each rank
    required_args: Mapping[str, Any] = field(default_factory=dict)
    present_args: tuple[str, ...] = ()
    forbidden_args: tuple[str, ...] = ()
    required_env: Mapping[str, str] = field(default_factory=dict)
    present_env: tuple[str, ...] = ()
    forbidden_env: tuple[str, ...] = ()
    required_libraries: tuple[str, ...] = ()
    library_mode: str = "every"
    library_roles: tuple[str, ...] = ()  # "every" means every process of these roles
    library_ranks: tuple[str, ...] = ()  # ... and/or of these ranks (fnmatch: "TP*")

    @property
    def label(self) -> str:
        return repr(self.name) if self.name else Path(self.path).name

    def to_dict(self) -> dict[str, Any]:
        """The contract as recorded with a run (env values of secret names redacted)."""
        return {
            "path": self.path, "sha256": self.sha256, "name": self.name,
            "engine": self.engine, "description": self.description,
            "settings": dict(self.settings),
            **({"every_rank": dict(self.every_rank)} if self.every_rank else {}),
            "engine_args": {"required": dict(self.required_args),
                            "present": list(self.present_args),
                            "forbidden": list(self.forbidden_args)},
            "env": {"required": redact_env(self.required_env),
                    "present": list(self.present_env), "forbidden": list(self.forbidden_env)},
            "libraries": {"required": list(self.required_libraries), "mode": self.library_mode,
                          **({"roles": list(self.library_roles)} if self.library_roles else {}),
                          **({"ranks": list(self.library_ranks)} if self.library_ranks else {})},
        }


class _Reader:
    """Holds the file text so errors can point at the line a key is on."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, key: str, section: str | None = None) -> int | None:
        """First line assigning ``key`` (or opening ``[key]``), after ``[section]`` if given."""
        start = 0
        if section:
            start = (self._find(re.compile(rf"^\s*\[\s*{re.escape(section)}\s*\]"), 0)
                     or 1) - 1
        pattern = re.compile(rf"^\s*(\[\s*)?[\"']?{re.escape(key)}[\"']?\s*(=|\]|\.)")
        return self._find(pattern, start) or self._find(pattern, 0)

    def _find(self, pattern: re.Pattern[str], start: int) -> int | None:
        for number in range(start, len(self.lines)):
            if pattern.match(self.lines[number]):
                return number + 1
        return None

    def fail(self, key: str, message: str, section: str | None = None) -> UsageError:
        line = self.line_of(key, section)
        where = f"{self.path}:{line}" if line else str(self.path)
        return UsageError(f"contract {where}: {message}")

    def check_keys(self, table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in allowed:
                name = f"{where}.{key}" if where else key
                raise self.fail(key, f"unknown key {name!r}" + did_you_mean(key, allowed),
                                where or None)

    def table(self, data: Mapping[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, f"{key!r} must be a table ([{key}])")
        return value

    def names(self, value: Any, section: str, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"{section}.{key} must be a list of names", section)
        return tuple(value)

    def required(self, value: Any, section: str) -> tuple[dict[str, Any], tuple[str, ...]]:
        """``required`` is a table (name = exact value) or a list (names, any value)."""
        if isinstance(value, dict):
            return dict(value), ()
        if isinstance(value, list):
            return {}, self.names(value, section, "required")
        raise self.fail("required", f"{section}.required must be a table (name = value) or a "
                        "list of names", section)

    def text(self, data: Mapping[str, Any], key: str) -> str | None:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, f"{key!r} must be a string")
        return value


def _check_env_values(reader: _Reader, values: Mapping[str, Any]) -> dict[str, str]:
    for name, value in values.items():
        if not isinstance(value, str):
            raise reader.fail(name, f"env.required.{name} must be a string (env values are "
                                    f"text): write \"{value}\"", "env")
    return dict(values)


def _no_overlap(reader: _Reader, section: str, required: set[str], forbidden: set[str]) -> None:
    both = sorted(required & forbidden)
    if both:
        raise reader.fail(both[0], f"{section}: {both[0]!r} is both required and forbidden",
                          section)


def load_contract(path: Path | str) -> Contract:
    """Read and check a contract file; any problem is a one-line :class:`UsageError`."""
    path = Path(path)
    doc = read_toml(path, "file", prefix="contract ")
    data = doc.data
    reader = _Reader(path, "\n".join(doc.lines))
    reader.check_keys(data, _TOP_KEYS, "")
    sections = {}
    for name, allowed in _SECTION_KEYS.items():
        sections[name] = reader.table(data, name)
        reader.check_keys(sections[name], allowed, name)
    args, env, libs = sections["engine_args"], sections["env"], sections["libraries"]
    req_args, present_args = reader.required(args.get("required", {}), "engine_args")
    forbidden_args = reader.names(args.get("forbidden", []), "engine_args", "forbidden")
    _no_overlap(reader, "engine_args", {*req_args, *present_args}, set(forbidden_args))
    req_env, present_env = reader.required(env.get("required", {}), "env")
    forbidden_env = reader.names(env.get("forbidden", []), "env", "forbidden")
    _no_overlap(reader, "env", {*req_env, *present_env}, set(forbidden_env))
    mode = libs.get("mode", "every")
    if mode not in MODES:
        raise reader.fail("mode", f"libraries.mode {mode!r} is not one of {', '.join(MODES)}"
                          + did_you_mean(str(mode), MODES), "libraries")
    return Contract(
        path=str(path), sha256=hashlib.sha256(doc.raw).hexdigest(),
        name=reader.text(data, "name"), engine=reader.text(data, "engine"),
        description=reader.text(data, "description") or "",
        settings=reader.table(data, "settings"),
        every_rank=reader.table(data, "every_rank"),
        required_args=req_args, present_args=present_args, forbidden_args=forbidden_args,
        required_env=_check_env_values(reader, req_env), present_env=present_env,
        forbidden_env=forbidden_env,
        required_libraries=reader.names(libs.get("required", []), "libraries", "required"),
        library_mode=mode,
        library_roles=reader.names(libs.get("roles", []), "libraries", "roles"),
        library_ranks=reader.names(libs.get("ranks", []), "libraries", "ranks"),
    )
