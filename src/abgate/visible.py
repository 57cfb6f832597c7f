"""Text shown to a person, its invisible characters made visible: what a report or a
terminal prints of a name, a path or a model's metadata never moves the cursor,
recolours the screen or reverses the text after it (``report.untrusted`` builds the
reports' escaping on it; ``progress`` and the CLI print through it)."""

from __future__ import annotations

import unicodedata

__all__ = ["visible"]

# Unicode categories shown as <U+XXXX>: format (bidi embeddings, overrides and isolates,
# zero-width characters), line and paragraph separators, surrogates, private use and
# unassigned code points.
_HIDDEN = {"Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def _shown(ch: str) -> str:
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"\\x{code:02x}"
    return f"<U+{code:04X}>"


def _is_hidden(ch: str, keep: str) -> bool:
    if ch in keep:
        return False
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return True
    return code > 0x7F and unicodedata.category(ch) in _HIDDEN


def visible(text: str, keep: str = "") -> str:
    """``text`` with every control character (C0, DEL, C1, so ANSI ESC too), bidi
    override or isolate, zero-width or other format character, line/paragraph
    separator and lone surrogate written visibly: ``\\x1b``, ``<U+202E>``. ``keep``:
    characters let through (a multi-line description keeps ``\\n``)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_shown(ch) if _is_hidden(ch, keep) else ch for ch in text)
