"""Checks that a rendered report shows hostile text (an experiment's name and
description, a model's metadata) as text: Markdown parsed with markdown-it (GFM tables
and strikethrough on, raw HTML recognised as CommonMark does), HTML with the standard
library's parser."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from markdown_it.token import Token

MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
# What a report must never emit: C0 (but tab and newline), DEL, C1, bidi embeddings,
# overrides and isolates, zero-width and other invisible format characters.
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                    "\u2060-\u206f\ufeff]")
VERDICT_LINE = re.compile(r"^\*\*Decision: ([A-Za-z/]+)\*\*")
# The report's own elements; anything else in its HTML came from somewhere else.
HTML_TAGS = {"html", "head", "meta", "title", "style", "script", "body", "main", "h1",
             "h2", "h3", "h4", "p", "div", "nav", "a", "ul", "li", "table", "thead", "tbody",
             "tr", "th", "td", "span", "code", "strong", "blockquote", "br", "figure",
             "figcaption", "svg", "g", "line", "rect", "circle", "path", "polyline", "text",
             "polygon"}


def verdict_lines(markdown: str) -> list[str]:
    """The decision of every line that reads as the report's verdict line."""
    return [m.group(1) for line in markdown.splitlines() if (m := VERDICT_LINE.match(line))]


def _strong_texts(children: list[Token]) -> list[str]:
    out, current = [], None
    for tok in children:
        if tok.type == "strong_open":
            current = ""
        elif tok.type == "strong_close" and current is not None:
            out.append(current)
            current = None
        elif current is not None:
            current += tok.content
    return out


def markdown_facts(markdown: str) -> dict[str, list[str]]:
    """What markdown-it makes of a report: its headings, raw HTML, bold texts that
    start with ``Decision:``, and any markup inside a blockquote (quoted user text)."""
    facts: dict[str, list[str]] = {"headings": [], "html": [], "decisions": [],
                                   "quoted_markup": []}
    tokens = MD.parse(markdown)
    depth = 0
    for k, tok in enumerate(tokens):
        depth += {"blockquote_open": 1, "blockquote_close": -1}.get(tok.type, 0)
        if tok.type == "heading_open":
            facts["headings"].append("".join(c.content for c in tokens[k + 1].children or []))
        if tok.type == "html_block":
            facts["html"].append(tok.content)
        if tok.type != "inline":
            continue
        children = tok.children or []
        facts["html"] += [c.content for c in children if c.type == "html_inline"]
        facts["decisions"] += [s for s in _strong_texts(children) if s.startswith("Decision:")]
        if depth:
            facts["quoted_markup"] += [c.type for c in children
                                       if c.type not in ("text", "softbreak", "hardbreak")]
    return facts


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def html_tags(html: str) -> list[str]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def html_problems(html: str) -> list[str]:
    """Elements the report does not make, a script beyond its own two, hidden chars."""
    tags = html_tags(html)
    problems = [f"<{t}>" for t in sorted(set(tags) - HTML_TAGS)]
    if tags.count("script") != 2:
        problems.append(f"{tags.count('script')} scripts")
    problems += [f"hidden character {m.group(0)!r}" for m in HIDDEN.finditer(html)]
    return problems
