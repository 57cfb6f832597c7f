"""The report's figures as inline SVG, drawn from the saved samples and comparison.

- decode tok/s per arm (box, median, mean and every request as a dot);
- accuracy per arm with its confidence interval;
- per candidate: the distribution of per-pair speed ratios with the estimate, its CI
  and the policy's pass/fail lines; output length A vs B; seq-rep-4 A vs B with the
  repetition-outlier threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from abgate.compare.stats import wilson_clustered
from abgate.records.comparison import SpeedMetric
from abgate.report.blocks import Plot
from abgate.report.fmt import as_float
from abgate.report.load import AbData, Point, paired_points
from abgate.report.svg import (
    FAIL_COLOR,
    LEGEND_MARGIN,
    NEUTRAL_COLOR,
    PASS_COLOR,
    TEXT_PX,
    Canvas,
    Scale,
    arm_color,
    c,
    nice_range,
    nice_step,
    tick_text,
)

MAX_DOTS = 3000
REP_THRESHOLD = 0.4  # abgate.scoring.health.find_outliers' default
SPEED_LABELS = {"steady_decode_tps": "steady decode tok/s", "prefill_tps": "prefill tok/s",
                "ttft_s": "TTFT (s)"}


def _thin(values: Sequence[object], limit: int = MAX_DOTS) -> list[int]:
    """Indices of at most ``limit`` evenly spaced entries (all when fewer)."""
    n = len(values)
    if n <= limit:
        return list(range(n))
    return [round(k * (n - 1) / (limit - 1)) for k in range(limit)]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values."""
    pos = q * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def _arm_row(cv: Canvas, x_of: Scale, values: list[float], cy: float, band: float,
             color: str) -> None:
    ordered = sorted(values)
    q1, med, q3 = (quantile(ordered, q) for q in (0.25, 0.5, 0.75))
    half = band * 0.3
    cv.line(x_of(ordered[0]), cy, x_of(ordered[-1]), cy, stroke=color, cls="mark")
    cv.el("rect", x=x_of(q1), y=cy - half, width=max(x_of(q3) - x_of(q1), 1.0),
          height=2 * half, fill=color, fill_opacity="0.15", stroke=color, cls="mark")
    cv.line(x_of(med), cy - half, x_of(med), cy + half, stroke=color, stroke_width="3",
            cls="mark")
    mean = sum(values) / len(values)
    cv.el("path", d=f"M{c(x_of(mean))} {c(cy - 5)}l5 5l-5 5l-5 -5z", fill="#111827",
          cls="mark")
    for i in _thin(values):
        jitter = ((i * 0.6180339887) % 1.0 - 0.5) * band * 0.55
        cv.el("circle", cx=x_of(values[i]), cy=cy + jitter, r="2.2", fill=color,
              fill_opacity="0.45", cls="mark dot")


def speed_plot(data: AbData, metric: str) -> Plot:
    """Per-request speed of every arm: one row per arm."""
    label = SPEED_LABELS.get(metric, metric)
    names = data.ordered
    per_arm = [[v for p in data.arms[n].points if (v := p.speed.get(metric)) is not None]
               for n in names]
    plot_id = f"plot-speed-{metric}"
    cv = Canvas(plot_id, f"{label} per request, per arm",
                height=80 + 56 * len(names), margin=(30, 20, 46, 110))
    x = cv.x_scale(*nice_range([v for vs in per_arm for v in vs]))
    band = (cv.bottom - cv.top) / len(names)
    centers = [cv.top + band * (k + 0.5) for k in range(len(names))]
    cv.x_axis(x, label)
    cv.category_axis(names, centers)
    for k, values in enumerate(per_arm):
        if values:
            _arm_row(cv, x, values, centers[k], band, arm_color(k))
        else:
            cv.text(cv.left + 8, centers[k] + 4, "no measurements", cls="label mark")
    cv.legend([("#111827", "mean (diamond)"), (NEUTRAL_COLOR, "box: quartiles, bar: median")])
    return Plot(plot_id, cv.render(),
                f"{label.capitalize()} of every measured request; box = quartiles, thick "
                "bar = median, diamond = mean, line = min to max.")


def accuracy_plot(data: AbData, confidence: float) -> Plot:
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    names = data.ordered
    cv = Canvas("plot-accuracy", "accuracy per arm with confidence intervals",
                height=80 + 40 * len(names), margin=(30, 20, 46, 110))
    x = cv.x_scale(0.0, 1.0)
    band = (cv.bottom - cv.top) / len(names)
    centers = [cv.top + band * (k + 0.5) for k in range(len(names))]
    cv.x_axis(x, "accuracy", fmt=lambda v: f"{100 * v:.0f}%")
    cv.category_axis(names, centers)
    for k, name in enumerate(names):
        arm = data.arms[name]
        acc, se = as_float(arm.quality("accuracy")), as_float(arm.quality("accuracy_se"))
        color, cy = arm_color(k), centers[k]
        if acc is None:
            cv.text(cv.left + 8, cy + 4, "not scored", cls="label mark")
            continue
        n_scored = as_float(arm.quality("n_scored")) or 0.0
        n_items = as_float(arm.quality("n_items")) or 0.0
        low, high, _ = wilson_clustered(acc, math.nan if se is None else se, int(n_scored),
                                        int(n_items), z)
        if not math.isnan(low):
            lo, hi = x(low), x(high)
            cv.line(lo, cy, hi, cy, stroke=color, stroke_width="3", cls="mark")
            for end in (lo, hi):
                cv.line(end, cy - 7, end, cy + 7, stroke=color, stroke_width="2", cls="mark")
        cv.el("circle", cx=x(acc), cy=cy, r="5.5", fill=color, cls="mark")
        cv.text(x(acc), cy - 10, f"{100 * acc:.1f}%", anchor="middle")
    return Plot("plot-accuracy", cv.render(),
                f"Accuracy of each arm with its {confidence:.0%} Wilson interval (at the "
                "effective sample size of the item-clustered standard error).")


def _speedups(pairs: list[tuple[Point, Point]], metric: str, higher: bool) -> list[float]:
    out = []
    for a, b in pairs:
        va, vb = a.speed.get(metric), b.speed.get(metric)
        if va and vb and va > 0 and vb > 0:
            out.append(vb / va if higher else va / vb)
    return out


def _bins(values: list[float], lo: float, hi: float) -> list[int]:
    count = min(40, max(8, int(2 * math.sqrt(len(values)))))
    width = (hi - lo) / count
    bins = [0] * count
    for v in values:
        bins[min(count - 1, max(0, int((v - lo) / width)))] += 1
    return bins


def _histogram(cv: Canvas, x: Scale, ratios: list[float], color: str) -> None:
    bins = _bins([x.clamp(v) for v in ratios], x.lo, x.hi) if ratios else [0]
    y = cv.y_scale(0.0, max(max(bins), 1) * 1.1)
    cv.y_axis(y, "pairs", fmt=lambda v: f"{v:.0f}")
    width = (x.hi - x.lo) / len(bins)
    for k, count in enumerate(bins):
        if count:
            left, right = x(x.lo + k * width), x(x.lo + (k + 1) * width)
            cv.el("rect", x=left + 0.5, y=y(count), width=max(right - left - 1.0, 0.5),
                  height=y(0) - y(count), fill=color, cls="mark bar")


@dataclass(frozen=True)
class RefLine:
    """A vertical reference line of the ratio plot, and how it is told apart: the
    estimate thick and solid, the pass line dashed, the fail line dotted, "no change"
    thin; pass and fail lines also carry their value at the top (``×1.02``)."""

    value: float
    color: str
    legend: str
    dash: str
    width: str
    tag: str = ""


def _ratio_lines(gain: float | None, loss: float | None, est: float | None) -> list[RefLine]:
    lines = [RefLine(1.0, NEUTRAL_COLOR, "no change", "", "1.5")]
    if gain is not None:
        lines.append(RefLine(1 + gain, PASS_COLOR, f"pass: CI above ×{1 + gain:.3g}", "6 3",
                             "2", f"×{1 + gain:.3g}"))
    if loss is not None:
        lines.append(RefLine(1 - loss, FAIL_COLOR, f"fail: CI below ×{1 - loss:.3g}", "2 3",
                             "2", f"×{1 - loss:.3g}"))
    if est is not None:
        lines.append(RefLine(est, "#111827", f"estimate ×{est:.3f} (CI shaded)", "", "3.5"))
    return lines


def _draw_ref_lines(cv: Canvas, x: Scale, lines: list[RefLine]) -> None:
    row = 0
    for ref in lines:
        px = x(x.clamp(ref.value))
        cv.line(px, cv.top, px, cv.bottom, stroke=ref.color, stroke_width=ref.width,
                stroke_dasharray=ref.dash or None, cls="mark")
        if ref.tag:  # right of its line (left of it at the right edge), one row each
            width = TEXT_PX * len(ref.tag)
            tx = px + 4 if px + 4 + width <= cv.right else max(px - 4 - width, cv.left + 2)
            row += 1
            cv.text(tx, cv.top + 12 * row, ref.tag, cls="reflabel", fill=ref.color)
    cv.legend([(ref.color, ref.legend) for ref in lines], dashes=[ref.dash for ref in lines])


def ratio_plot(data: AbData, arm: str, index: int) -> Plot:
    """Histogram of per-pair speedups of the policy's speed metric."""
    limits = data.policy.speed if data.policy else None
    metric = limits.metric if limits else "steady_decode_tps"
    section = data.arm_comparison(arm).speed.get(metric) or SpeedMetric()
    higher = section.higher_is_better is not False
    ratios = _speedups(paired_points(data, arm), metric, higher)
    est = as_float(section.ratio.estimate)
    ci = list(section.ratio.ci or (None, None))
    if not higher:  # show A/B: above 1 is faster either way
        est = 1.0 / est if est else None
        ci = [1.0 / v if v else None for v in reversed(ci)]
    lines = _ratio_lines(limits.min_speedup if limits else None,
                         limits.max_slowdown if limits else None, est)
    bounds = [v for v in ci if v is not None]
    plot_id = f"plot-ratio-{index}"
    cv = Canvas(plot_id, f"per-pair speedup of {arm} over {data.baseline}",
                margin=LEGEND_MARGIN)
    core = sorted(ratios)
    span = [quantile(core, 0.01), quantile(core, 0.99)] if core else []
    x = cv.x_scale(*nice_range(span, include=[ref.value for ref in lines] + bounds))
    step_text = tick_text(nice_step(x.hi - x.lo, 6))
    cv.x_axis(x, f"speedup on {SPEED_LABELS.get(metric, metric)}: {arm} vs {data.baseline} "
                 "per pair (>1 = faster)", fmt=lambda v: "×" + step_text(v))
    if len(bounds) == 2:
        lo, hi = (x(x.clamp(v)) for v in bounds)
        cv.el("rect", x=lo, y=cv.top, width=max(hi - lo, 1.0), height=cv.bottom - cv.top,
              fill=arm_color(index), fill_opacity="0.12", cls="mark")
    _histogram(cv, x, ratios, arm_color(index))
    _draw_ref_lines(cv, x, lines)
    if not ratios:
        cv.note("no paired speed measurements")
    return Plot(plot_id, cv.render(),
                f"Per-pair speedup of {arm} over {data.baseline}; the estimate is the "
                "geometric mean of per-item ratios with its bootstrap CI (shaded).")


def _kind(a: Point, b: Point) -> tuple[str, str]:
    if a.output_sha is not None and a.output_sha == b.output_sha:
        return NEUTRAL_COLOR, "token-identical"
    if a.correct and b.correct is False:
        return FAIL_COLOR, "became wrong"
    if a.correct is False and b.correct:
        return PASS_COLOR, "became correct"
    return "#2563eb", "different tokens, same score"


def _scatter(cv: Canvas, pairs: list[tuple[Point, Point]], xs: list[float],
             ys: list[float], hi: float) -> None:
    x, y = cv.x_scale(0.0, hi), cv.y_scale(0.0, hi)
    cv.line(x(0.0), y(0.0), x(hi), y(hi), stroke=NEUTRAL_COLOR, stroke_dasharray="4 3",
            cls="mark")
    kinds = [_kind(a, b) for a, b in pairs]
    for i in _thin(xs):
        cv.el("circle", cx=x(xs[i]), cy=y(ys[i]), r="3", fill=kinds[i][0],
              fill_opacity="0.55", cls="mark dot")
    seen = dict.fromkeys(kinds)
    cv.legend([(color, text) for color, text in seen])
    if not xs:
        cv.note("no paired samples")


def length_plot(data: AbData, arm: str, index: int) -> Plot:
    pairs = [(a, b) for a, b in paired_points(data, arm)
             if a.tokens is not None and b.tokens is not None]
    xs = [float(a.tokens or 0.0) for a, _ in pairs]
    ys = [float(b.tokens or 0.0) for _, b in pairs]
    hi = max([*xs, *ys, 1.0]) * 1.05
    plot_id = f"plot-length-{index}"
    cv = Canvas(plot_id, f"output tokens, {data.baseline} vs {arm}", width=480, height=436,
                margin=LEGEND_MARGIN)
    _scatter(cv, pairs, xs, ys, hi)
    cv.x_axis(cv.x_scale(0.0, hi), f"output tokens, {data.baseline}")
    cv.y_axis(cv.y_scale(0.0, hi), f"output tokens, {arm}")
    return Plot(plot_id, cv.render(),
                f"Output length per pair; points off the dashed diagonal changed length "
                f"under {arm}.")


def _outlier_labels(pairs: list[tuple[Point, Point]], xs: list[float], ys: list[float],
                    limit: int = 5) -> list[tuple[float, float, str]]:
    """Labels for the pairs beyond the threshold with the largest change; pairs at the
    same spot share one label (``key +N``)."""
    spots: dict[tuple[float, float], list[str]] = {}
    for (a, _), rx, ry in zip(pairs, xs, ys, strict=True):
        if max(rx, ry) >= REP_THRESHOLD:
            spots.setdefault((round(rx, 3), round(ry, 3)), []).append(a.key)
    ranked = sorted(spots.items(), key=lambda kv: (-abs(kv[0][1] - kv[0][0]), kv[1][0]))
    return [(rx, ry, keys[0] + (f" +{len(keys) - 1} more" if len(keys) > 1 else ""))
            for (rx, ry), keys in ranked[:limit]]


def _place_labels(cv: Canvas, labels: list[tuple[float, float, str]]) -> None:
    """Outlier labels beside their points, inside the plotting area and clear of each
    other: a label right of its point (left of it in the right half) moves down a row
    until it overlaps no label placed before it."""
    placed: list[tuple[float, float, float, float]] = []  # x0, y0, x1, y1
    row = 14.0  # a 10 px label's box is about 12 px high (descenders included)
    for px, py, text in labels:
        width = TEXT_PX * 0.95 * len(text)
        right = px < (cv.left + cv.right) / 2
        x0 = px + 5 if right else px - 5 - width
        x0 = min(max(x0, cv.left + 2), cv.right - 2 - width)
        ty = min(max(py - 5, cv.top + 10), cv.bottom - 2)
        while any(x0 < b[2] and b[0] < x0 + width and ty - 10 < b[3] and b[1] < ty + 3
                  for b in placed) and ty + row <= cv.bottom - 2:
            ty += row
        placed.append((x0, ty - 10, x0 + width, ty + 3))
        cv.text(x0, ty, text, cls="tick annot")


def repetition_plot(data: AbData, arm: str, index: int) -> Plot:
    pairs = [(a, b) for a, b in paired_points(data, arm)
             if a.rep is not None and b.rep is not None]
    xs = [float(a.rep or 0.0) for a, _ in pairs]
    ys = [float(b.rep or 0.0) for _, b in pairs]
    hi = max([*xs, *ys, REP_THRESHOLD + 0.1]) * 1.05
    plot_id = f"plot-repetition-{index}"
    cv = Canvas(plot_id, f"seq-rep-4, {data.baseline} vs {arm}", width=480, height=436,
                margin=LEGEND_MARGIN)
    x, y = cv.x_scale(0.0, hi), cv.y_scale(0.0, hi)
    cv.line(x(REP_THRESHOLD), cv.top, x(REP_THRESHOLD), cv.bottom, stroke=FAIL_COLOR,
            stroke_dasharray="2 3", cls="mark")
    cv.line(cv.left, y(REP_THRESHOLD), cv.right, y(REP_THRESHOLD), stroke=FAIL_COLOR,
            stroke_dasharray="2 3", cls="mark")
    _scatter(cv, pairs, xs, ys, hi)
    _place_labels(cv, [(x(rx), y(ry), label) for rx, ry, label in _outlier_labels(pairs, xs, ys)])
    cv.x_axis(x, f"seq-rep-4, {data.baseline}")
    cv.y_axis(y, f"seq-rep-4, {arm}")
    return Plot(plot_id, cv.render(),
                f"Share of repeated 4-grams per pair; beyond the red lines "
                f"(>= {REP_THRESHOLD}) a sample is a repetition outlier (labelled).")


def all_plots(data: AbData) -> tuple[list[Plot], dict[str, list[Plot]]]:
    """The per-arm plots and, per candidate, its comparison plots."""
    limits = data.policy.speed if data.policy else None
    metric = limits.metric if limits else "steady_decode_tps"
    confidence = limits.confidence if limits else 0.95
    overview = [speed_plot(data, "steady_decode_tps"), accuracy_plot(data, confidence)]
    if metric != "steady_decode_tps":
        overview.insert(1, speed_plot(data, metric))
    per_arm = {}
    for k, arm in enumerate(data.candidates, start=1):
        per_arm[arm] = [ratio_plot(data, arm, k), length_plot(data, arm, k),
                        repetition_plot(data, arm, k)]
    return overview, per_arm
