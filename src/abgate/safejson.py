"""The one guarded JSON reader: every JSON text abgate reads (its own records and JSONL
lines, imports from other tools, prompt files, engine-arg values, a server's stream) is
parsed by :func:`parse`, so a hostile text is a one-line error, never a traceback.

Before :mod:`json` sees the text, a scan without recursion (regular expressions only:
strings blanked, then innermost bracket pairs peeled one level per pass) refuses:

- nesting deeper than ``MAX_DEPTH`` levels (Python's json recurses once per level and
  raises ``RecursionError`` near 1,000);
- a number literal longer than ``MAX_DIGITS`` digits (Python refuses to convert an int
  of more than 4,300 digits with a bare ``ValueError``).

A file read by :func:`read_json` is refused past ``max_bytes`` before it is read. The
problem is a :class:`BadJson` (a ``ValueError``) carrying the reason and, where known,
the line; :func:`read_json` and :func:`loads` turn it into a one-line error naming
``file:line``. Type checks of the values stay with each reader (a ``doc_id`` is an int
or a string, a token ID an int in range).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from abgate.errors import AbgateError, UsageError

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_DIGITS", "BadJson", "loads", "parse", "read_bytes",
           "read_json", "read_text", "scan"]

MAX_DEPTH = 100  # abgate's records nest < 15 levels, lm-eval and vLLM files < 8
MAX_DIGITS = 1000  # below Python's 4,300-digit int limit; no measured value has 100
MAX_BYTES = 1 << 30  # a file read whole (1 GiB)

# A JSON string (never across a line: JSON strings hold no raw newline), so blanking
# strings keeps every newline where it was and line numbers stay right.
_STRING = re.compile(r'"(?:[^"\\\n]++|\\.)*+"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_PAIR = re.compile(r"\[\]|\{\}")
_LONG: dict[int, re.Pattern[str]] = {}


class BadJson(ValueError):
    """Why a JSON text was refused (``reason``), at ``line`` when known."""

    def __init__(self, reason: str, line: int | None = None, *, truncated: bool = False,
                 column: int | None = None, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.line, self.column, self.truncated = reason, line, column, truncated
        self.detail = detail  # json's own message, for a syntax error

    def at(self, where: str) -> str:
        """``where:line: reason`` (the line left out when unknown)."""
        return f"{where}:{self.line}: {self.reason}" if self.line else f"{where}: {self.reason}"


def _long_number(max_digits: int) -> re.Pattern[str]:
    if max_digits not in _LONG:
        _LONG[max_digits] = re.compile(rf"\d{{{max_digits + 1},}}")
    return _LONG[max_digits]


def _too_deep(bare: str, max_depth: int) -> bool:
    """Whether the brackets of ``bare`` (strings blanked) nest deeper than ``max_depth``:
    each pass removes the innermost pairs, one level of the bracket tree."""
    brackets = _NOT_BRACKET.sub("", bare)
    for _ in range(max_depth):
        shorter = _PAIR.sub("", brackets)
        if len(shorter) == len(brackets):
            return False  # nothing left, or unbalanced: json reports that
        brackets = shorter
    return _PAIR.search(brackets) is not None


def scan(text: str, *, max_depth: int = MAX_DEPTH, max_digits: int | None = MAX_DIGITS) -> None:
    """Refuse (:class:`BadJson`) what :func:`json.loads` must not see."""
    bare = _STRING.sub('""', text)
    if max_digits is not None:
        found = _long_number(max_digits).search(bare)
        if found is not None:
            raise BadJson(f"a number of {found.end() - found.start()} digits (at most "
                          f"{max_digits} are read)", bare.count("\n", 0, found.start()) + 1)
    if _too_deep(bare, max_depth):
        raise BadJson(f"JSON nested deeper than {max_depth} levels")


def _surely_within(text: str, max_depth: int, max_digits: int | None) -> bool:
    """Whether ``text`` cannot break either limit, without the scan (a served stream's
    chunks, thousands a second, are all like this): it opens no more brackets than
    ``max_depth`` in all (strings included), and is too short to hold a number longer
    than ``max_digits``."""
    return ((max_digits is None or len(text) <= max_digits)
            and text.count("[") + text.count("{") <= max_depth)


def parse(text: str, *, max_depth: int = MAX_DEPTH, max_digits: int | None = MAX_DIGITS,
          parse_int: Callable[[str], Any] | None = None,
          parse_constant: Callable[[str], Any] | None = None) -> Any:
    """The value of one JSON text, or :class:`BadJson` (``max_digits=None`` with a
    ``parse_int`` of its own reads integers of any length)."""
    if not _surely_within(text, max_depth, max_digits):
        scan(text, max_depth=max_depth, max_digits=max_digits)
    try:
        return json.loads(text, parse_int=parse_int, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
        raise BadJson(f"not valid JSON ({exc.msg})", exc.lineno, truncated=truncated,
                      column=exc.colno, detail=exc.msg) from None
    except RecursionError:  # unbalanced brackets the scan leaves to json
        raise BadJson(f"JSON nested deeper than {max_depth} levels") from None
    except BadJson:
        raise
    except (ValueError, OverflowError) as exc:  # a hook's refusal, Python's int limit
        raise BadJson(f"not valid JSON ({str(exc).splitlines()[0][:200]})") from None


def loads(text: str, where: str, *, error: type[AbgateError] = UsageError,
          **limits: Any) -> Any:
    """:func:`parse`, its refusal a one-line ``error`` naming ``where`` (and the line)."""
    try:
        return parse(text, **limits)
    except BadJson as exc:
        raise error(exc.at(where)) from None


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_bytes(path: Path, *, max_bytes: int = MAX_BYTES,
               error: type[AbgateError] = UsageError, where: str | None = None) -> bytes:
    """A file of at most ``max_bytes`` (its size checked before it is read)."""
    name = where or str(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{name}: {_size(size)}, more than the {_size(max_bytes)} abgate "
                        "reads from one file")
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{name}: not found") from None
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from None


def read_text(path: Path, *, max_bytes: int = MAX_BYTES,
              error: type[AbgateError] = UsageError, where: str | None = None) -> str:
    """A UTF-8 text file of at most ``max_bytes``, or a one-line ``error``."""
    name = where or str(path)
    data = read_bytes(path, max_bytes=max_bytes, error=error, where=where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{name}: not UTF-8 text (bad byte at offset {exc.start})") from None


def read_json(path: Path, *, max_bytes: int = MAX_BYTES,
              error: type[AbgateError] = UsageError, where: str | None = None,
              **limits: Any) -> Any:
    """The JSON value in ``path``; any problem a one-line ``error`` naming the file (and
    the line)."""
    text = read_text(path, max_bytes=max_bytes, error=error, where=where)
    return loads(text, where or str(path), error=error, **limits)
