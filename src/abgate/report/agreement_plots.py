"""The per-token KL histogram of a candidate, on a log scale, with the mean KLD and
the policy's limit marked (from the comparison's ``agreement.histogram``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from abgate.report.blocks import Plot
from abgate.report.fmt import as_float
from abgate.report.load import AbData
from abgate.report.svg import FAIL_COLOR, Canvas, Scale, arm_color


def _bars(edges: Sequence[float], counts: Sequence[int], below: int,
          above: int) -> list[tuple[float, float, int]]:
    """(left, right, count) in log10 units; the below/above buckets one decade wide."""
    logs = [math.log10(e) for e in edges]
    bars = [(logs[0] - 1.0, logs[0], below)]
    bars += [(logs[k], logs[k + 1], int(c)) for k, c in enumerate(counts)]
    bars.append((logs[-1], logs[-1] + 1.0, above))
    return bars


def _marker(cv: Canvas, x: Scale, value: float | None, color: str, dash: str) -> None:
    if value is None or value <= 0:
        return
    px = x(x.clamp(math.log10(value)))
    cv.line(px, cv.top, px, cv.bottom, stroke=color, stroke_width="2",
            stroke_dasharray=dash or None, cls="mark")


def kld_plot(data: AbData, arm: str, index: int) -> Plot | None:
    """Histogram of per-token KL(baseline || arm); None when agreement was not measured."""
    section = data.arm_comparison(arm).agreement
    if section is None or not section.measured:
        return None
    hist = section.histogram
    edges, counts = hist.edges, hist.counts
    if len(edges) != len(counts) + 1 or len(edges) < 2:
        return None
    bars = _bars(edges, counts, int(hist.below or 0), int(hist.above or 0))
    plot_id = f"plot-kld-{index}"
    cv = Canvas(plot_id, f"per-token KL, {data.baseline} vs {arm}")
    x = cv.x_scale(bars[0][0], bars[-1][1])
    y = cv.y_scale(0.0, max(max(c for _, _, c in bars), 1) * 1.1)
    cv.x_axis(x, "per-token KL(baseline ‖ candidate), nats, log scale (left bar: < 1e-6, "
              "incl. 0)", fmt=lambda v: f"1e{v:.0f}")
    cv.y_axis(y, "positions", fmt=lambda v: f"{v:.0f}")
    color = arm_color(index)
    for left, right, count in bars:
        if count:
            cv.el("rect", x=x(left) + 0.5, y=y(count), width=max(x(right) - x(left) - 1.0, 0.5),
                  height=y(0) - y(count), fill=color, cls="mark bar")
    mean = as_float(section.mean_kld.estimate)
    limit = data.policy.quality.max_mean_kld if data.policy else None
    _marker(cv, x, mean, "#111827", "")
    _marker(cv, x, limit, FAIL_COLOR, "5 4")
    cv.legend([(color, "positions"), ("#111827", "mean KLD"), (FAIL_COLOR, "policy limit")])
    if not any(c for _, _, c in bars):
        cv.note("no scored positions")
    return Plot(plot_id, cv.render(),
                f"Per-token KL divergence of {arm} from {data.baseline}, teacher-forced on "
                f"{data.baseline}'s output; black line: mean KLD, dashed red: the policy's "
                "max_mean_kld.")
