"""The report's figures keep their labels readable: legends wrap instead of running off
the plot, every colour a scatter uses has a legend entry, outlier labels stay inside
the plot and clear of each other, and the speed ratio's reference lines differ in
style. The page's own render check verifies the same in a browser, and can fail."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from abgate.report.blocks import Doc, Plot
from abgate.report.html import render_html
from abgate.report.load import load_ab
from abgate.report.plots import _place_labels, _ratio_lines, all_plots
from abgate.report.svg import LEGEND_MARGIN, TEXT_PX, Canvas
from tests.support.report import build_ab_dir

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LONG = [("#111", "token-identical"), ("#222", "became wrong"), ("#333", "became correct"),
        ("#444", "different tokens, same score")]


def _numbers(svg: str, tag: str, attr: str) -> list[float]:
    return [float(v) for v in re.findall(rf'<{tag} [^>]*\b{attr}="([-\d.]+)"', svg)]


def test_a_long_legend_wraps_inside_the_canvas() -> None:
    cv = Canvas("p", "t", width=480, height=436, margin=LEGEND_MARGIN)
    assert cv.legend(LONG) == 2
    svg = cv.render()
    texts = re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*class="legend">([^<]+)<', svg)
    assert len(texts) == 4 and len({y for _, y, _ in texts}) == 2
    for x, y, label in texts:
        assert float(x) + TEXT_PX * len(label) <= 480 and float(y) < LEGEND_MARGIN[0]


def test_every_scatter_colour_has_a_legend_entry(tmp_path: Path) -> None:
    _, per_arm = all_plots(load_ab(build_ab_dir(tmp_path / "ab")))
    scatters = [p for plots in per_arm.values() for p in plots
                if p.plot_id.startswith(("plot-length", "plot-repetition"))]
    assert len(scatters) == 4
    for plot in scatters:
        dots = set(re.findall(r'<circle [^>]*fill="(#\w+)"[^>]*class="mark dot"', plot.svg))
        swatches = set(re.findall(r'<rect [^>]*fill="(#\w+)"[^>]*class="swatch"', plot.svg))
        assert dots and dots <= swatches, (plot.plot_id, dots - swatches)


def test_outlier_labels_stay_inside_and_apart() -> None:
    cv = Canvas("p", "t", width=480, height=436, margin=LEGEND_MARGIN)
    spot = (cv.right - 3, cv.top + 2)  # at the top right corner: would be clipped
    _place_labels(cv, [(*spot, "item-0001#0 +3 more"), (*spot, "item-0002#0"),
                       (spot[0] - 10, spot[1] + 4, "item-0003#1")])
    labels = re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]+)<', cv.render())
    boxes = [(float(x), float(y) - 10, float(x) + TEXT_PX * 0.95 * len(t), float(y) + 3)
             for x, y, t in labels]
    assert len(boxes) == 3
    for x0, y0, x1, y1 in boxes:
        assert cv.left <= x0 and x1 <= cv.right and cv.top <= y0 and y1 <= cv.bottom
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])


def test_reference_lines_are_told_apart_by_style() -> None:
    lines = {ref.legend.split(":")[0].split(" ")[0]: ref for ref in _ratio_lines(0.02, 0.02,
                                                                                1.001)}
    assert set(lines) == {"no", "pass", "fail", "estimate"}
    styles = {(ref.dash, ref.width) for ref in lines.values()}
    assert len(styles) == 4  # no two share dash and width
    assert lines["estimate"].dash == "" and float(lines["estimate"].width) > max(
        float(r.width) for k, r in lines.items() if k != "estimate")
    assert lines["pass"].tag == "×1.02" and lines["fail"].tag == "×0.98"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                    "(apt-get install chromium; .ci/run installs it)")
def test_the_page_check_fails_on_overlapping_or_clipped_labels(tmp_path: Path) -> None:
    cv = Canvas("plot-bad", "bad", width=300, height=200)
    cv.el("circle", cx=50.0, cy=50.0, r="3", cls="mark dot")
    cv.text(100, 16, "first legend label", cls="legend")
    cv.text(104, 18, "second legend label", cls="legend")  # on top of the first
    cv.text(280, 100, "runs past the right edge", cls="tick annot")
    page = tmp_path / "bad.html"
    page.write_text(render_html(Doc("bad", "INCONCLUSIVE", [Plot("plot-bad", cv.render(),
                                                                  "a bad plot")])))
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,900",
                          "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False)
    check = re.search(r'<p id="render-check"[^>]*>([^<]*)', res.stdout)
    assert check is not None, res.stderr[-2000:]
    assert 'data-status="error"' in check.group(0)
    assert "'first legend label' and 'second legend label' overlap" in check.group(1)
    assert "'runs past the right edge' clipped" in check.group(1)
