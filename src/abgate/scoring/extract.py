"""Integer answer extraction for GSM8K-style outputs: exact, explainable, fast.

:func:`extract_integer` is a pure function. It looks for the answer in a fixed
order and the first rule that finds a candidate decides; a later rule is never
consulted when an earlier one found a candidate it cannot read:

1. ``boxed``: the last non-empty ``\\boxed{...}`` or ``\\fbox{...}`` (balanced braces);
2. ``hash``: the last ``#### ...`` marker (a markdown heading such as
   ``#### Step 2: ...`` is not a marker);
3. ``answer_phrase``: the last ``answer is`` / ``answer:`` / ``final answer``;
4. ``last_number``: the last number anywhere in the text.

Within the span of rules 1-3 the part after the last ``=`` is read, and its first
number is the answer. See ``docs/answer-extraction.md`` for the full rules and
the cases they were written against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abgate.scoring.numbers import Number, first_number, format_int, last_number, normalize

__all__ = ["REASONS", "SOURCES", "Extraction", "extract_integer", "reference_answer"]

SOURCES = ("boxed", "hash", "answer_phrase", "last_number")
REASONS = ("no_answer", "non_integral", "malformed")
_SPAN_CHARS = 200  # the explaining span is cut to this many characters

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"(?<!\\)[{}]")
_HASH = re.compile(r"(?<!#)####(?!#)")
_HEADING = re.compile(r"[ \t*_]*[^\W\d_]")  # "#### Step 2: ..." is a heading, not a marker
# "final answer", "answer is" (not "answer isn't"), "answer:", case-insensitive, with
# markdown emphasis between the words. Written to start with a character class so
# the regex engine can skip ahead to candidate letters (4x faster than with \b first).
_PHRASE = re.compile(
    r"[AaFf](?<!\w.)(?i:(?<=f)inal[ \t*_]+answer\b"
    r"|(?<=a)nswer(?:[ \t*_]+is\b(?!n['\u2019]t)|[ \t*_]*[:\uff1a]))"
)
# A line with only these (spaces, emphasis, a colon, an opening math delimiter) is
# "empty": an answer marker that ends its line is read from the next non-empty line.
_BLANK = re.compile(r"(?:\s|[*_:\uff1a$]|\\[\[(])*")


@dataclass(frozen=True)
class Extraction:
    """The answer read from one output, or why there is none.

    ``source`` names the rule that decided (also for ``non_integral`` and
    ``malformed``, so a reviewer sees *which* span could not be read); it is None
    only for ``no_answer``. ``span`` is the text the decision was read from.
    """

    value: int | None
    source: str | None
    reason: str | None
    span: str | None = None

    @property
    def valid(self) -> bool:
        """True when an integer answer was read."""
        return self.value is not None

    def __repr__(self) -> str:  # the dataclass repr would fail on ints over 4300 digits
        value = None if self.value is None else format_int(self.value)
        return (
            f"Extraction(value={value}, source={self.source!r}, reason={self.reason!r}, "
            f"span={self.span!r})"
        )

    def to_dict(self) -> dict[str, object]:
        """``{"value", "source", "reason", "span"}``, JSON-ready."""
        return {
            "value": self.value,
            "source": self.source,
            "reason": self.reason,
            "span": self.span,
        }


def _clip(span: str) -> str:
    span = span.strip()
    return span if len(span) <= _SPAN_CHARS else span[: _SPAN_CHARS - 1] + "\u2026"


def _read_span(span: str, source: str) -> Extraction:
    """Rules 2-5: the first number after the span's last ``=``."""
    text = normalize(span)
    if "=" in text:
        text = text.rpartition("=")[2]
    number = first_number(text)
    if number is None:
        return Extraction(None, source, "malformed", _clip(span))
    return _decided(number, source, _clip(span))


def _decided(number: Number, source: str, span: str) -> Extraction:
    if number.value is None:
        return Extraction(None, source, "non_integral", span)
    return Extraction(number.value, source, None, span)


def _last_box(text: str) -> str | None:
    """Content of the last non-empty, brace-balanced ``\\boxed{}``/``\\fbox{}``."""
    opens = [m.end() - 1 for m in _BOX.finditer(text)]
    if not opens:
        return None
    closing: dict[int, int] = {}
    stack: list[int] = []
    for brace in _BRACE.finditer(text, opens[0]):
        if brace.group() == "{":
            stack.append(brace.start())
        elif stack:
            closing[stack.pop()] = brace.start()
    for start in reversed(opens):
        end = closing.get(start)
        if end is not None and text[start + 1 : end].strip():
            return text[start + 1 : end]
    return None


def _rest_of_line(text: str, pos: int) -> str:
    """From ``pos`` to the end of its line; the next non-empty line if that is empty."""
    end = text.find("\n", pos)
    line = text[pos:] if end < 0 else text[pos:end]
    while _BLANK.fullmatch(line) and end >= 0:
        start = end + 1
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
    return "" if _BLANK.fullmatch(line) else line


def _hash_span(text: str) -> str | None:
    if "####" not in text:
        return None
    for marker in reversed(list(_HASH.finditer(text))):
        if not _HEADING.match(text, marker.end()):
            return _rest_of_line(text, marker.end())
    return None


def _phrase_span(text: str) -> str | None:
    last: re.Match[str] | None = None
    for last in _PHRASE.finditer(text):  # noqa: B007  (we want the final binding)
        pass
    return None if last is None else _rest_of_line(text, last.end())


def extract_integer(text: str) -> Extraction:
    """Read the integer answer from a model output. Never raises on any ``str``."""
    box = _last_box(text) if "box" in text else None
    if box is not None:
        return _read_span(box, "boxed")
    hashed = _hash_span(text)
    if hashed is not None:
        return _read_span(hashed, "hash")
    phrase = _phrase_span(text)
    if phrase is not None:
        return _read_span(phrase, "answer_phrase")
    number = last_number(normalize(text))
    if number is None:
        return Extraction(None, None, "no_answer", None)
    return _decided(number, "last_number", _clip(number.text))


def reference_answer(gsm8k_answer: str) -> int:
    """The integer after ``####`` in a GSM8K reference solution.

    Raises ValueError when the solution has no ``####`` marker or its value is not
    an integer.
    """
    span = _hash_span(gsm8k_answer)
    if span is None:
        raise ValueError("reference solution has no '####' answer marker")
    extraction = _read_span(span, "hash")
    if extraction.value is None:
        raise ValueError(f"reference answer {span.strip()!r} is {extraction.reason}")
    return extraction.value
