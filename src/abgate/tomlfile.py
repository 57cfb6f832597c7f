"""abgate's one TOML reader: a file's tables, and the line a key path is on.

Every TOML file abgate reads as configuration (experiments, policies) goes through
:func:`read_toml` (or :func:`parse_toml` for text that is not a file of its own): a
missing, unreadable, non-UTF-8 or invalid file is a one-line :class:`UsageError` naming
``file:line`` where the parser gives it. :meth:`TomlDoc.line_of` finds the line a key
path such as ``("arms", "q8", "engine_args")`` is on, so that a bad value found later
(by the configuration models, :mod:`abgate.schema`) is named at its line too.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate.errors import UsageError

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]*?)\s*\]\]?")
_KEY_PART = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*""")


@dataclass(frozen=True)
class TomlDoc:
    """A parsed TOML document, its label (the path as given) and its lines."""

    label: str
    data: dict[str, Any]
    lines: tuple[str, ...] = field(default=(), repr=False)
    raw: bytes = field(default=b"", repr=False)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line ``path`` (table names then a key) is on: its own ``[table]``
        header or ``key =`` line, else the line of the nearest enclosing key (an inline
        table, an array), else None."""
        keys = [str(p) for p in path if isinstance(p, str)]
        while keys:
            found = _find(self.lines, keys)
            if found is not None:
                return found
            keys = keys[:-1]
        return None

    def where(self, path: Sequence[str | int] = ()) -> str:
        """``label:line`` for ``path`` (just the label when no line is known)."""
        line = self.line_of(path) if path else None
        return f"{self.label}:{line}" if line else self.label


def _split_key(text: str) -> list[str] | None:
    """The parts of a dotted TOML key (``a."b".c``), or None when ``text`` is not one."""
    parts, pos = [], 0
    while True:
        m = _KEY_PART.match(text, pos)
        if m is None:
            return None
        parts.append(m.group(1).strip("\"'"))
        pos = m.end()
        if pos == len(text):
            return parts
        if text[pos] != ".":
            return None
        pos += 1


def _find(lines: Sequence[str], keys: list[str]) -> int | None:
    """The line of the header ``[keys]`` or of an assignment to ``keys`` (a dotted key
    under any enclosing header), else the first line that sets a key below ``keys``
    (``engine_args.flash_attn = true`` for ``engine_args``)."""
    current: list[str] = []
    below = None
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            current = _split_key(header.group(1)) or []
            path = current
        else:
            name, eq, _ = line.partition("=")
            assigned = _split_key(name) if eq else None
            if not assigned:
                continue
            path = current + assigned
        if path == keys:
            return number
        if below is None and path[:len(keys)] == keys:
            below = number
    return below


def parse_toml(text: str, label: str, raw: bytes | None = None, prefix: str = "") -> TomlDoc:
    """``text`` parsed; a syntax error is one line naming ``label:line`` (after
    ``prefix``, e.g. "policy ")."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\(at line (\d+), column \d+\)", message)
        where = f"{label}:{found.group(1)}" if found else label
        raise UsageError(f"{prefix}{where}: invalid TOML: {message}") from None
    return TomlDoc(label, data, tuple(text.splitlines()),
                   text.encode("utf-8") if raw is None else raw)


def read_toml(path: Path, what: str = "file", prefix: str = "") -> TomlDoc:
    """The TOML file at ``path``; ``what`` names it in the errors ("experiment file"),
    after ``prefix`` ("policy ")."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{prefix}{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{prefix}{what} {str(path)!r} is a directory, not a file") from None
    except OSError as exc:
        raise UsageError(f"{prefix}{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{prefix}{path}: not UTF-8 text (bad byte at offset {exc.start})"
                         ) from None
    return parse_toml(text, str(path), raw, prefix)
