"""Blocks to GitHub-flavoured Markdown. Plots are HTML-only and are left out. Every
text goes through ``untrusted.md_text`` (user spans escaped, one line per block)."""

from __future__ import annotations

from abgate.report.blocks import Block, Bullets, Doc, Heading, Para, Plot, Quote, Table
from abgate.report.untrusted import md_quote, md_text


def _cell(text: str) -> str:
    return md_text(text, table=True) or " "


def _table(table: Table) -> list[str]:
    width = len(table.header)
    align = ["---" if k in table.text_cols else "---:" for k in range(width)]
    lines = ["| " + " | ".join(_cell(h) for h in table.header) + " |",
             "|" + "|".join(align) + "|"]
    for row in table.rows:
        cells = [*row, *([""] * (width - len(row)))][:width]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def _block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + md_text(block.text)]
    if isinstance(block, Para):
        return [md_text(block.text)]
    if isinstance(block, Quote):
        return md_quote(block.text)
    if isinstance(block, Bullets):
        return ["- " + md_text(item) for item in block.items]
    if isinstance(block, Table):
        return _table(block)
    assert isinstance(block, Plot)
    return []


def render_markdown(doc: Doc) -> str:
    chunks = ["\n".join(lines) for block in doc.blocks if (lines := _block(block))]
    return "\n\n".join(chunks) + "\n"
