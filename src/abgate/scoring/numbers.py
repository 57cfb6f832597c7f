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

# Digits converted per int() call: under Python's default limit of 4300 digits for
# str <-> int conversion (sys.get_int_max_str_digits()), which exists to bound the
# quadratic cost; chunking keeps huge answers exact without lifting it globally.
_CHUNK = 4000

_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")
_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mathsf|mbox|operatorname)"
    r"\s*\{"
)
# A thin or no-break space (LaTeX or Unicode) between a digit and a group of exactly
# three digits is a thousands separator: drop it. Anywhere else it is just a space.
_GROUP_SPACE = re.compile(r"([0-9])(?:\\[,!]|[\u00a0\u2009\u202f])(?=[0-9]{3}(?![0-9]))")
_LATEX_SPACE = re.compile(r"\\(?:[,;: ]|q?quad\b)")
_UNICODE_SPACE = re.compile(r"[\u00a0\u2007\u2009\u202f]")
_DELIMITER = re.compile(r"\\[()\[\]]")
_CURRENCIES = ("\\$", "$", "\u20ac", "\u00a3")  # \$ first, so its backslash goes too
# The characters a run of number tokens is made of (after its sign): see last_number.
_RUN_CHARS = frozenset("0123456789,./")

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
    """Remove the markup that is not part of any number, keeping line structure.

    Each rewrite runs only when its trigger characters occur, so plain text costs
    a few substring tests.
    """
    if "{,}" in text:
        text = text.replace("{,}", ",")
    latex = "\\" in text
    spaced = any(ch in text for ch in "\u00a0\u2007\u2009\u202f")
    if latex:
        if "frac" in text:
            text = _FRAC.sub(r"\1/\2", text)
        text = _WRAPPER.sub("", text)
    if latex or spaced:
        text = _GROUP_SPACE.sub(r"\1", text)
    if latex:
        text = _LATEX_SPACE.sub(" ", text.replace("\\!", ""))
        text = _DELIMITER.sub(" ", text)
    if spaced:
        text = _UNICODE_SPACE.sub(" ", text)
    for currency in _CURRENCIES:
        if currency in text:
            text = text.replace(currency, "")
    return text


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
    """The last number in already-normalized ``text``, or None.

    Same answer as scanning the whole text, but it only tokenizes the run of number
    characters around the last digit (plus one character for a sign): a match can
    neither start inside that run nor reach into it from before it.
    """
    last_digit = max(map(text.rfind, "0123456789"))
    if last_digit < 0:
        return None
    start = last_digit
    while start > 0 and text[start - 1] in _RUN_CHARS:
        start -= 1
    last: re.Match[str] | None = None
    for last in _NUMBER.finditer(text, max(0, start - 1)):  # noqa: B007  (want the last)
        pass
    return None if last is None else _to_number(last, text)
