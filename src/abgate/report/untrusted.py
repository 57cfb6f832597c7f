"""Text that came from a user or a model, in a report: marked where it enters, escaped
once per output format where it leaves.

A report's blocks hold ``str`` in the house's small markup (``**bold**`` and ```code```,
written by abgate's own templates). Any text from a record (an experiment's name and
description, a model's metadata, paths, config values, an engineer's ``why``) enters
through :func:`user`, which shows its control characters visibly (:func:`visible`) and
wraps it in two sentinel characters. Data cannot forge a sentinel: they are control
characters, and :func:`abgate.visible.visible` rewrites every one. The renderers then split a text
into trusted markup and user spans (:func:`spans`) and escape the spans for their
format: :func:`md_text` (Markdown), :func:`html_text` (HTML). Trusted text gets the
same control-character treatment, and Markdown's raw HTML characters are escaped in it
too, so a forgotten :func:`user` can at worst turn on bold, never a tag or a heading.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from abgate.visible import visible

__all__ = ["CLOSE", "OPEN", "html_text", "md_text", "plain", "spans", "unmarked", "user",
           "visible"]

OPEN, CLOSE = "\x0e", "\x0f"  # shift out, shift in: never let through by visible()
_SPAN = re.compile(f"{OPEN}([^{OPEN}{CLOSE}]*){CLOSE}")
# Characters that Markdown reads as markup anywhere in a line (GFM: ~ strikes through,
# | splits a table cell, #123 links an issue; & starts an entity). Escaped only where
# they can mean something, so that ``>= 30``, ``q4_0`` and ``[0, 1]`` stay legible:
# ``>`` at the start of a line (a blockquote), ``_`` unless between two letters or
# digits (CommonMark never reads such an underscore as emphasis), ``]`` never (no link
# or image opens without an unescaped ``[``).
_MD_SPECIAL = re.compile(r"([\\`*\[<#|!~&])")
_MD_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# What starts a block at the beginning of a line (after the escapes above): a list
# item, a setext underline, a thematic break, an ordered list item.
_MD_LINE_START = re.compile(r"^([-+=>]|\*(?=[ \t]|$))|^(\d{1,9})([.)])(?=[ \t]|$)")


def _clean(value: object) -> str:
    return visible(str(value).replace("\r\n", "\n"), keep="\n\t")


def user(value: object) -> str:
    """``value`` as untrusted text for a report block: one span, whatever it holds
    (sentinels in it are data, shown as ``\\x0e``; so pass raw text, not marked)."""
    return OPEN + _clean(value) + CLOSE


def spans(text: str) -> list[tuple[bool, str]]:
    """``text`` as ``(untrusted, part)`` pieces in order; trusted parts made visible."""
    out, at = [], 0
    for m in _SPAN.finditer(text):
        if m.start() > at:
            out.append((False, visible(text[at:m.start()], keep="\n\t")))
        out.append((True, visible(m.group(1), keep="\n\t")))  # (forged by unmarked data?)
        at = m.end()
    if at < len(text):
        out.append((False, visible(text[at:], keep="\n\t")))
    return out


def unmarked(value: Any) -> Any:
    """``value`` (text, or lists and dicts of it) with the marks of :func:`user`
    removed: for report.json, which shows what the Markdown shows as plain strings."""
    if isinstance(value, str):
        return "".join(part for _, part in spans(value))
    if isinstance(value, dict):
        return {unmarked(k): unmarked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [unmarked(v) for v in value]
    return value


def plain(text: str) -> str:
    """The text alone, marks removed, every control character visible (for an HTML
    attribute, a page title, an SVG label, a terminal)."""
    return visible("".join(part for _, part in spans(str(text))))


# --- Markdown ---------------------------------------------------------------------


def md_escape(text: str) -> str:
    """Untrusted text outside a code span: every Markdown/HTML character escaped."""
    return _MD_UNDERSCORE.sub(r"\\_", _MD_SPECIAL.sub(r"\\\1", text))


def md_line_start(line: str) -> str:
    """Escape what would start a list, a setext heading or a thematic break."""
    return _MD_LINE_START.sub(lambda m: f"\\{m.group(1)}" if m.group(1)
                             else f"{m.group(2)}\\{m.group(3)}", line, count=1)


def _code_span(content: str, table: bool) -> str:
    """A code span holding ``content`` literally: a fence longer than any backtick run
    in it, padded when it starts or ends with a backtick."""
    runs = [len(r) for r in re.findall(r"`+", content)]
    fence = "`" * (max(runs, default=0) + 1)
    if content.startswith("`") or content.endswith("`"):
        content = f" {content} "
    if table:
        content = content.replace("|", "\\|")
    return f"{fence}{content}{fence}"


def md_text(text: str, *, table: bool = False) -> str:
    """One line of Markdown from a block's text: whitespace (newlines too) collapsed,
    trusted ``**``/```` ` ```` markup kept, user spans escaped (literal inside a code
    span), ``<``, ``&`` and ``|`` escaped in trusted text too."""
    out: list[str] = []
    code: list[str] | None = None  # the content of the open code span
    for untrusted, part in spans(" ".join(text.split())):
        if untrusted:
            if code is not None:
                code.append(part)
            else:
                out.append(md_escape(part))
            continue
        for k, piece in enumerate(part.split("`")):
            if k:  # a trusted backtick opens or closes a code span
                if code is None:
                    code = []
                else:
                    out.append(_code_span("".join(code), table))
                    code = None
            if code is not None:
                code.append(piece)
            else:
                out.append(re.sub(r"([<&|])", r"\\\1", piece))
    if code is not None:  # an unclosed span: its text, escaped
        out.append(md_escape("`" + "".join(code)))
    return "".join(out) if table else md_line_start("".join(out))


def md_quote(text: str) -> list[str]:
    """A blockquote of untrusted text, one escaped line per line of it (hard breaks),
    so that nothing in it can start a block outside the quote."""
    lines = [" ".join(line.split()) for line in plain_lines(text)]
    lines = [md_line_start(md_escape(line)) for line in lines if line]
    if not lines:
        return []
    return ["> " + line + ("\\" if k < len(lines) - 1 else "")
            for k, line in enumerate(lines)]


def plain_lines(text: str) -> list[str]:
    """The lines of a text's parts, marks removed (newlines kept)."""
    return "".join(part for _, part in spans(text)).split("\n")


# --- HTML -------------------------------------------------------------------------

_CODE = re.compile(r"(`[^`]*`)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_HOLE = re.compile(f"{OPEN}(\\d+){CLOSE}")


def _inline(text: str) -> str:
    out = []
    for part in _CODE.split(text):
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append(f"<code>{escape(part[1:-1])}</code>")
        else:
            out.append(_BOLD.sub(r"<strong>\1</strong>", escape(part)))
    return "".join(out)


def html_text(text: str) -> str:
    """HTML from a block's text: trusted ``**``/```` ` ```` markup as ``<strong>`` and
    ``<code>``, every user span escaped and never read as markup."""
    pieces = spans(text)
    holes = [part for untrusted, part in pieces if untrusted]
    skeleton, n = [], 0
    for untrusted, part in pieces:
        if untrusted:
            skeleton.append(f"{OPEN}{n}{CLOSE}")
            n += 1
        else:
            skeleton.append(part)
    return _HOLE.sub(lambda m: escape(holes[int(m.group(1))]), _inline("".join(skeleton)))
