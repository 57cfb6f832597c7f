"""A minimal SVG plotting kit: linear scales, "nice" ticks, a canvas with axes.

Output is deterministic text (coordinates rounded to 0.1 px) so a report rendered
twice from the same records is byte-identical. Styling of axes and text is left to
the page's CSS classes (``axis``, ``grid``, ``tick``, ``label``); data marks carry
their colours as attributes and the class ``mark``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from abgate.report.untrusted import plain

BASELINE_COLOR = "#6b7280"
PALETTE = ("#2563eb", "#d97706", "#7c3aed", "#059669", "#db2777", "#0891b2")
PASS_COLOR, FAIL_COLOR, NEUTRAL_COLOR = "#15803d", "#b91c1c", "#9ca3af"
TEXT_PX = 6.5  # width of one character of 11 px legend text, for layout
LEGEND_ROW = 14.0  # height of one legend row
LEGEND_MARGIN = (46, 20, 46, 64)  # a canvas margin with room for two legend rows


def arm_color(index: int) -> str:
    """Index 0 is the baseline; candidates cycle through the palette."""
    return BASELINE_COLOR if index == 0 else PALETTE[(index - 1) % len(PALETTE)]


def c(value: float) -> str:
    """A coordinate as text."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


@dataclass(frozen=True)
class Scale:
    """Maps ``[lo, hi]`` linearly onto ``[px0, px1]``."""

    lo: float
    hi: float
    px0: float
    px1: float

    def __call__(self, value: float) -> float:
        if self.hi == self.lo:
            return (self.px0 + self.px1) / 2.0
        return self.px0 + (value - self.lo) / (self.hi - self.lo) * (self.px1 - self.px0)

    def clamp(self, value: float) -> float:
        return min(max(value, min(self.lo, self.hi)), max(self.lo, self.hi))


def nice_step(span: float, count: int) -> float:
    raw = span / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= factor * power:
            return factor * power
    return 10.0 * power


def nice_range(values: Sequence[float], *, pad: float = 0.05,
               include: Sequence[float] = ()) -> tuple[float, float]:
    """A range covering ``values`` and ``include``, padded and widened when flat."""
    pool = [v for v in (*values, *include) if math.isfinite(v)]
    if not pool:
        return 0.0, 1.0
    lo, hi = min(pool), max(pool)
    if hi == lo:
        width = abs(lo) * 0.1 or 1.0
        return lo - width, hi + width
    margin = (hi - lo) * pad
    return lo - margin, hi + margin


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    step = nice_step(hi - lo, count)
    first = math.ceil(lo / step - 1e-9) * step
    out, k = [], 0
    while first + k * step <= hi + 1e-9 * step:
        value = first + k * step
        out.append(0.0 if abs(value) < step * 1e-9 else value)
        k += 1
    return out


def tick_text(step: float) -> Callable[[float], str]:
    """A formatter with just enough decimals for ticks ``step`` apart."""
    decimals = 0
    while decimals < 9 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return lambda value: f"{value:.{decimals}f}"


def _attrs(attrs: dict[str, object]) -> str:
    parts = []
    for key, value in attrs.items():
        if value is None:
            continue
        name = "class" if key == "cls" else key.rstrip("_").replace("_", "-")
        text = c(value) if isinstance(value, float) else str(value)
        parts.append(f'{name}="{escape(plain(text))}"')
    return " ".join(parts)


class Canvas:
    """One ``<svg class="plot">`` with a plotting area inside fixed margins."""

    def __init__(self, plot_id: str, title: str, width: int = 640, height: int = 320,
                 margin: tuple[int, int, int, int] = (30, 20, 46, 64)) -> None:
        self.plot_id, self.title = plot_id, title
        self.width, self.height = width, height
        top, right, bottom, left = margin
        self.left, self.right = float(left), float(width - right)
        self.top, self.bottom = float(top), float(height - bottom)
        self.parts: list[str] = []

    def el(self, tag: str, body: str = "", /, **attrs: object) -> None:
        inner = f">{body}</{tag}>" if body else "/>"
        self.parts.append(f"<{tag} {_attrs(attrs)}{inner}")

    def text(self, x: float, y: float, text: str, *, anchor: str = "start",
             cls: str = "tick", **attrs: object) -> None:
        self.el("text", escape(plain(text)), x=x, y=y, text_anchor=anchor, cls=cls, **attrs)

    def line(self, x1: float, y1: float, x2: float, y2: float, **attrs: object) -> None:
        self.el("line", x1=x1, y1=y1, x2=x2, y2=y2, **attrs)

    def x_scale(self, lo: float, hi: float) -> Scale:
        return Scale(lo, hi, self.left, self.right)

    def y_scale(self, lo: float, hi: float) -> Scale:
        return Scale(lo, hi, self.bottom, self.top)

    def x_axis(self, x: Scale, label: str, fmt: Callable[[float], str] | None = None,
               count: int = 6) -> None:
        values = ticks(x.lo, x.hi, count)
        show = fmt or tick_text(nice_step(x.hi - x.lo, count))
        for value in values:
            px = x(value)
            self.line(px, self.top, px, self.bottom, cls="grid")
            self.text(px, self.bottom + 16, show(value), anchor="middle")
        self.line(self.left, self.bottom, self.right, self.bottom, cls="axis")
        self.text((self.left + self.right) / 2, self.height - 8, label, anchor="middle",
                  cls="label")

    def y_axis(self, y: Scale, label: str, fmt: Callable[[float], str] | None = None,
               count: int = 5) -> None:
        values = ticks(y.lo, y.hi, count)
        show = fmt or tick_text(nice_step(y.hi - y.lo, count))
        for value in values:
            py = y(value)
            self.line(self.left, py, self.right, py, cls="grid")
            self.text(self.left - 6, py + 4, show(value), anchor="end")
        self.line(self.left, self.top, self.left, self.bottom, cls="axis")
        mid = (self.top + self.bottom) / 2
        self.text(14, mid, label, anchor="middle", cls="label",
                  transform=f"rotate(-90 14 {c(mid)})")

    def category_axis(self, names: Sequence[str], centers: Sequence[float]) -> None:
        for name, cy in zip(names, centers, strict=True):
            self.text(self.left - 8, cy + 4, name, anchor="end", cls="label")
        self.line(self.left, self.top, self.left, self.bottom, cls="axis")

    def legend(self, entries: Sequence[tuple[str, str]], *, x: float | None = None,
               y: float | None = None, dashes: Sequence[str | None] = ()) -> int:
        """Swatches with labels across the top margin, wrapped into more rows when they
        do not fit the width (a canvas with a legend of several entries keeps a top
        margin of ``LEGEND_MARGIN``); returns the rows used. ``dashes[k]`` draws entry
        k as a line with that dash pattern ("" solid) instead of a square, so a
        reference line's legend shows its style as well as its colour."""
        px0 = self.left if x is None else x
        px, py, rows = px0, 16.0 if y is None else y, 1
        for k, (color, label) in enumerate(entries):
            dash = dashes[k] if k < len(dashes) else None
            swatch = 10.0 if dash is None else 18.0
            width = swatch + 4 + TEXT_PX * len(label)
            if px > px0 and px + width > self.width - 4:
                px, py, rows = px0, py + LEGEND_ROW, rows + 1
            if dash is None:
                self.el("rect", x=px, y=py - 9, width=10.0, height=10.0, fill=color,
                        cls="swatch")
            else:
                self.line(px, py - 4, px + swatch, py - 4, stroke=color, stroke_width="2.5",
                          stroke_dasharray=dash or None, cls="swatch")
            self.text(px + swatch + 4, py, label, cls="legend")
            px += width + 10
        return rows

    def note(self, text: str) -> None:
        """A centred message (e.g. "no data") in the plotting area."""
        self.text((self.left + self.right) / 2, (self.top + self.bottom) / 2, text,
                  anchor="middle", cls="label mark")

    def render(self) -> str:
        title = escape(plain(self.title))
        head = (f'<svg class="plot" id="{escape(plain(self.plot_id))}" '
                f'viewBox="0 0 {self.width} {self.height}" width="{self.width}" '
                f'height="{self.height}" role="img" aria-label="{title}">')
        return "\n".join([head, f"<title>{title}</title>", *self.parts, "</svg>"])
