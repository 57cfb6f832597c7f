"""Blocks to GitHub-flavoured Markdown. Plots are HTML-only and are left out."""

from __future__ import annotations

from abgate.report.blocks import Block, Bullets, Doc, Heading, Para, Plot, Table


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or " "


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
        return ["#" * block.level + " " + block.text]
    if isinstance(block, Para):
        return [block.text]
    if isinstance(block, Bullets):
        return ["- " + " ".join(item.split()) for item in block.items]
    if isinstance(block, Table):
        return _table(block)
    assert isinstance(block, Plot)
    return []


def render_markdown(doc: Doc) -> str:
    chunks = ["\n".join(lines) for block in doc.blocks if (lines := _block(block))]
    return "\n\n".join(chunks) + "\n"
