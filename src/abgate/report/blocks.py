"""The report as a list of format-neutral blocks, rendered to Markdown or HTML.

Text may carry two inline marks, written the Markdown way: ``**bold**`` and
```code```; the HTML renderer converts them after escaping. Text from a record (a
user's or a model's) enters through ``report.untrusted.user`` and is escaped by each
renderer, never read as markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BADGES = ("pass", "fail", "inconclusive", "unmeasured", "ACCEPT", "REJECT", "INCONCLUSIVE")


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Quote:
    """Untrusted text shown as written, line by line, in a delimited block (a
    blockquote): an experiment's description."""

    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    # Left-aligned columns; the others are numbers and align right.
    text_cols: frozenset[int] = frozenset({0})
    # Columns whose cells are outcomes (pass/fail/...) shown as badges in HTML.
    badge_cols: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Plot:
    """A figure (HTML only): ``svg`` is complete inline SVG, ``caption`` one sentence."""

    plot_id: str
    svg: str
    caption: str


Block = Heading | Para | Quote | Bullets | Table | Plot


@dataclass
class Doc:
    title: str
    decision: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)

    @property
    def plots(self) -> list[Plot]:
        return [b for b in self.blocks if isinstance(b, Plot)]
