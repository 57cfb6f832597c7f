"""Errors abgate raises on purpose.

A :class:`UsageError` is bad input found before expensive work starts (exit code 2).
An :class:`AbgateError` is a failure while working (exit code 1). Both carry a
one-line message meant for a person; the CLI prints it without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AbgateError(Exception):
    """A failure abgate detected and can explain in one line."""

    exit_code = 1

    def __str__(self) -> str:
        # one line whatever it quotes (a key or value with a newline in it, a library's
        # multi-line message): line breaks are shown escaped
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")


class UsageError(AbgateError):
    """Bad input: a flag, file, key or value the user can fix. Exit code 2."""

    exit_code = 2


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), at most ``limit`` characters: for
    messages that quote a library's own (possibly multi-line) error."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Return up to ``n`` entries of ``choices`` that look like ``word``."""
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix, or an empty string when nothing is close."""
    matches = close_matches(word, choices)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"
