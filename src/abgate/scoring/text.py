"""Text answers scored by exact match or by a regular expression (the generic suite).

A :class:`TextScorer` is one item's rule. ``exact``: the output, stripped of surrounding
whitespace, equals the answer, stripped (case-sensitive). ``regex``: the answer is a
Python regular expression and a match anywhere in the output (``re.search``) is correct.
Both are pure functions of the output text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["SCORERS", "TextScorer"]

SCORERS = ("exact", "regex")
_SPAN_CHARS = 200


@dataclass(frozen=True)
class TextScorer:
    """``kind`` and the reference ``answer`` (a pattern for ``regex``)."""

    kind: Literal["exact", "regex"]
    answer: str
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind == "regex" and self._pattern is None:
            object.__setattr__(self, "_pattern", re.compile(self.answer))

    def match(self, text: str) -> str | None:
        """The span that made ``text`` correct (cut to 200 characters), else None."""
        if self.kind == "exact":
            stripped = text.strip()
            return stripped[:_SPAN_CHARS] if stripped == self.answer.strip() else None
        assert self._pattern is not None
        found = self._pattern.search(text)
        return None if found is None else found.group(0)[:_SPAN_CHARS]
