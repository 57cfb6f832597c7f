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


class UsageError(AbgateError):
    """Bad input: a flag, file, key or value the user can fix. Exit code 2."""

    exit_code = 2


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Return up to ``n`` entries of ``choices`` that look like ``word``."""
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix, or an empty string when nothing is close."""
    matches = close_matches(word, choices)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"
