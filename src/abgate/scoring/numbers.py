"""The number grammar behind answer extraction.

This module knows how to clean a span of model output (LaTeX wrappers, math
delimiters, currency, no-break spaces) and how to read numbers out of it. It
knows nothing about *where* the answer is; :mod:`abgate.scoring.extract` decides
that. Everything here is exact: integers are parsed from their digits (no float
round-trip, no size limit) and a non-zero decimal part is never rounded away.

Grammar of one number (after :func:`normalize`)::

    number   := [sign] (int [ "." digits ] | "." digits) [ "/" den ] [ "%" ]
    sign     := "+" | "-" | U+2212      (a sign only when not preceded by a letter,
                                         digit or closing bracket: "10-4" is 10, 4)
    int      := d{1,3} ("," ddd)+        (thousands groups of exactly three)
              | digits
    den      := digits, not zero         (a tight "a/b" is a fraction; in "a/b/c", a date,
                                         each part is a number of its own)

Currency signs ($, \\$, EUR, GBP) are removed before matching, so they may stand
before or after the sign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Number", "first_number", "format_int", "last_number", "normalize", "parse_digits"]

# Python refuses str -> int conversions above this many digits by default
# (sys.int_info.str_digits_check_threshold is 640; the default limit is 4300).
_CHUNK = 4000

_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")
_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mathsf|mbox|operatorname)"
    r"\s*\{"
)
# A thin or no-break space (LaTeX or Unicode) between a digit and a group of exactly
# three digits is a thousands separator: drop it. Anywhere else it is just a space.
_GROUP_SPACE = re.compile(r"(?<=[0-9])(?:\\[,!]|[\u00a0\u2009\u202f])(?=[0-9]{3}(?![0-9]))")
_NEG_SPACE = re.compile(r"\\!")
_SPACE = re.compile(r"\\[,;: ]|\\q?quad\b|[\u00a0\u2007\u2009\u202f]")
_DELIMITER = re.compile(r"\\[()\[\]]")
_CURRENCY = re.compile(r"\\?\$|[\u20ac\u00a3]")

_NUMBER = re.compile(
    r"""
    (?P<sign>[-+\u2212])?
    (?<![0-9])                                 # never start inside a number
    (?:(?<=[0-9]/)(?P<chain>))?                # after "a/" (as in "a/b/c"): no new fraction
    (?:
        (?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.(?P<frac>[0-9]+))?
      | \.(?P<bare>[0-9]+)
    )
    (?(chain)|(?:/(?P<den>0*[1-9][0-9]*)(?![0-9]|/[0-9]|\.[0-9]))?)
    (?:\\?%)?
    """,
    re.VERBOSE,
)
_OPERAND_END = frozenset(")]}")


@dataclass(frozen=True)
class Number:
    """One number read from text: exact when integral, else ``value`` is None."""

    value: int | None  # None when the number is not an integer (12.5, .75, 1/2)
    text: str  # the characters it was read from, for explaining


def parse_digits(digits: str) -> int:
    """Turn a string of ASCII digits into an int exactly, whatever its length."""
    if len(digits) <= _CHUNK:
        return int(digits)
    value = 0
    for start in range(0, len(digits), _CHUNK):
        chunk = digits[start : start + _CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def format_int(value: int) -> str:
    """The exact decimal text of ``value``, whatever its size (``str`` refuses huge ints)."""
    if value.bit_length() < 3 * _CHUNK:  # fewer than 4000 * log10(8) digits: str() is fine
        return str(value)
    sign, value = ("-", -value) if value < 0 else ("", value)
    chunks: list[str] = []
    base = 10**_CHUNK
    while value >= base:
        value, low = divmod(value, base)
        chunks.append(str(low).zfill(_CHUNK))
    return sign + str(value) + "".join(reversed(chunks))


def normalize(text: str) -> str:
    """Remove the markup that is not part of any number, keeping line structure."""
    if "\\" in text:
        text = text.replace("{,}", ",")
        text = _FRAC.sub(r"\1/\2", text)
        text = _WRAPPER.sub("", text)
        text = _GROUP_SPACE.sub("", text)
        text = _NEG_SPACE.sub("", text)
        text = _SPACE.sub(" ", text)
        text = _DELIMITER.sub(" ", text)
    else:
        text = text.replace("{,}", ",")
        text = _GROUP_SPACE.sub("", text)
        text = _SPACE.sub(" ", text)
    return _CURRENCY.sub("", text)


def _is_operator(text: str, sign_at: int) -> bool:
    """A sign right after a letter, digit or closing bracket is an operator or range."""
    if sign_at == 0:
        return False
    before = text[sign_at - 1]
    return before.isalnum() or before in _OPERAND_END


def _to_number(match: re.Match[str], text: str) -> Number:
    sign = match.group("sign")
    start = match.start()
    if sign is not None and _is_operator(text, start):
        sign, start = None, start + 1
    negative = sign in ("-", "\u2212")
    int_digits = (match.group("int") or "0").replace(",", "")
    frac = match.group("frac") or match.group("bare") or ""
    den = match.group("den")
    shown = text[start : match.end()]
    if den is not None:
        ratio = Fraction(parse_digits(int_digits + frac), 10 ** len(frac) * parse_digits(den))
        if ratio.denominator != 1:
            return Number(None, shown)
        magnitude = ratio.numerator
    elif frac.strip("0"):
        return Number(None, shown)
    else:
        magnitude = parse_digits(int_digits)
    return Number(-magnitude if negative else magnitude, shown)


def first_number(text: str) -> Number | None:
    """The first number in already-normalized ``text``, or None."""
    match = _NUMBER.search(text)
    return None if match is None else _to_number(match, text)


def last_number(text: str) -> Number | None:
    """The last number in already-normalized ``text``, or None."""
    last: re.Match[str] | None = None
    for last in _NUMBER.finditer(text):  # noqa: B007  (we want the final binding)
        pass
    return None if last is None else _to_number(last, text)
