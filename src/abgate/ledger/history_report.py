"""``abgate history``'s table rows and its ``--html`` page, drawn with the reports' own
SVG kit (:mod:`abgate.report.svg`) and page renderer (:mod:`abgate.report.html`)."""

from __future__ import annotations

import datetime as dt

from abgate.ledger.history import History, HistoryPoint, Series, short
from abgate.report.blocks import Doc, Heading, Para, Plot, Table
from abgate.report.html import render_html
from abgate.report.svg import FAIL_COLOR, PALETTE, Canvas, c, nice_range
from abgate.report.untrusted import user

RULE = ("A point is a **step** when its change from the previous point of the same "
        "configuration exceeds 1.96 x sqrt(se1^2 + se2^2) (the two runs' own standard "
        "errors, items as clusters) and, for speed metrics, is at least {band:.0%} of the "
        "previous value. Points without a standard error are not judged.")
HEADER = ("when (UTC)", "commit", "record", "unit", "value", "se", "n", "status", "evidence")


def when(p: HistoryPoint) -> str:
    if p.started_at is None:
        return "-"
    return dt.datetime.fromtimestamp(p.started_at, dt.UTC).strftime("%Y-%m-%d %H:%M")


def commit(p: HistoryPoint) -> str:
    text = (p.git_commit or "-")[:10]
    return text + ("+dirty" if p.git_dirty else "")


def status(p: HistoryPoint) -> str:
    return "MISSING" if p.missing else (p.status or "-")


def row(p: HistoryPoint) -> tuple[str, ...]:
    se = "-" if p.se is None else f"{p.se:.3g}"
    value = "-" if p.value is None else f"{p.value:.4g}"
    return (when(p), user(commit(p)), user(p.record_id[:10]), user(p.unit or "-"), value, se,
            str(p.n), status(p), user(p.evidence))


def plot(series: Series, index: int, metric: str) -> Plot:
    plot_id = f"plot-history-{index}"
    cv = Canvas(plot_id, f"{metric} over time: {series.label}", width=760, height=340)
    pts = [p for p in series.points if p.value is not None]
    spans = [v for p in pts for v in (p.value - 1.96 * (p.se or 0.0),  # type: ignore[operator]
                                      p.value + 1.96 * (p.se or 0.0))]  # type: ignore[operator]
    y = cv.y_scale(*nice_range(spans))
    x = cv.x_scale(-0.5, max(len(pts) - 0.5, 0.5))
    cv.y_axis(y, metric)
    cv.line(cv.left, cv.bottom, cv.right, cv.bottom, cls="axis")
    color = PALETTE[index % len(PALETTE)]
    path = " ".join(f"{'M' if k == 0 else 'L'}{c(x(k))} {c(y(p.value))}"  # type: ignore[arg-type]
                    for k, p in enumerate(pts))
    if len(pts) > 1:
        cv.el("path", d=path, fill="none", stroke=color, stroke_width="1.5", cls="mark")
    for k, p in enumerate(pts):
        assert p.value is not None
        px = x(k)
        if p.se is not None:
            cv.line(px, y(p.value - 1.96 * p.se), px, y(p.value + 1.96 * p.se), stroke=color,
                    stroke_width="2", cls="mark")
        mark = FAIL_COLOR if p.step else color
        cv.el("circle", cx=px, cy=y(p.value), r="5" if p.step else "3.5", fill=mark,
              cls="mark")
        if p.step:
            cv.text(px, y(p.value) - 10, "step", anchor="middle", cls="annot")
        cv.text(px, cv.bottom + 16, commit(p)[:7], anchor="middle")
    cv.text((cv.left + cv.right) / 2, cv.height - 8, "commit (oldest left)", anchor="middle",
            cls="label")
    cv.legend([(color, "value with 95% interval"), (FAIL_COLOR, "step")])
    return Plot(plot_id, cv.render(),
                f"{metric} of each recorded run of this configuration in start order, with "
                "+/-1.96 standard errors; red points are flagged steps.")


def render(h: History) -> str:
    n_steps = len(h.steps)
    doc = Doc(f"abgate history: {h.metric}",
              f"{n_steps} STEP{'S' if n_steps != 1 else ''} FLAGGED" if n_steps
              else "NO STEP FLAGGED")
    doc.add(Heading(1, doc.title), Para(RULE.format(band=h.min_change)))
    for k, series in enumerate(h.series):
        key = series.key  # from the records: shown through user()
        doc.add(Heading(2, user(series.label), f"series-{k}"),
                Para(f"engine `{user(key.engine)}`, model `{user(key.model)}`, config "
                     f"`{user(short(key.config_digest, 16))}`, suite "
                     f"`{user(key.suite)}`, workload "
                     f"`{user(short(key.workload_digest, 16))}`"),
                plot(series, k, h.metric),
                Table(HEADER, tuple(row(p) for p in series.points),
                      text_cols=frozenset({0, 1, 2, 3, 7, 8})))
    return render_html(doc)
