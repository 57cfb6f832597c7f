"""Blocks to one self-contained HTML page: inline CSS, inline SVG plots, and a tiny
inline script that checks every plot was drawn (its result is written into the page
as ``#render-check[data-status]``, and any script error turns it to ``error``). The
page loads nothing from anywhere: no network, no external files."""

from __future__ import annotations

from html import escape

from abgate.report.blocks import BADGES, Block, Bullets, Doc, Heading, Para, Plot, Quote, Table
from abgate.report.untrusted import html_text, plain, plain_lines

CSS = """
:root { --fg: #111827; --muted: #6b7280; --line: #e5e7eb; --bg: #ffffff; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #f9fafb; line-height: 1.5;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 28px 48px; background: var(--bg); }
h1 { font-size: 26px; margin: 8px 0 12px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-top: 8px; border-top: 2px solid var(--line); }
h3 { font-size: 16px; margin: 24px 0 8px; }
code { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
ul { padding-left: 22px; } li { margin: 3px 0; }
.table-wrap { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 13.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 10px; vertical-align: top;
  text-align: left; }
th { background: #f3f4f6; font-weight: 600; min-width: 4em; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600;
  font-size: 12.5px; text-transform: uppercase; }
.badge-pass, .badge-ACCEPT { background: #dcfce7; color: #166534; }
.badge-fail, .badge-REJECT { background: #fee2e2; color: #991b1b; }
.badge-inconclusive, .badge-unmeasured, .badge-INCONCLUSIVE { background: #fef3c7; color: #92400e; }
.banner { padding: 12px 16px; border-radius: 8px; margin: 12px 0; font-size: 17px; }
.banner.ACCEPT { background: #dcfce7; } .banner.REJECT { background: #fee2e2; }
.banner.INCONCLUSIVE { background: #fef3c7; }
nav.toc { font-size: 13.5px; color: var(--muted); margin: 4px 0 12px; }
nav.toc a { color: #1d4ed8; margin-right: 14px; text-decoration: none; }
figure { margin: 12px 0 20px; }
blockquote.description { margin: 8px 0 16px; padding: 4px 14px; color: #374151;
  border-left: 4px solid var(--line); }
figcaption { font-size: 13px; color: var(--muted); max-width: 720px; }
svg.plot { display: block; max-width: 100%; height: auto; background: #fff; }
svg.plot .grid { stroke: #eef0f3; stroke-width: 1; }
svg.plot .axis { stroke: #9ca3af; stroke-width: 1; }
svg.plot text { fill: #374151; font: 11px system-ui, sans-serif; }
svg.plot text.label { font-size: 12px; fill: #111827; }
svg.plot text.legend { font-size: 11px; fill: #374151; }
svg.plot text.annot { font-size: 10px; fill: #991b1b; }
svg.plot text.reflabel { font-size: 10.5px; font-weight: 600; }
#render-check { margin-top: 32px; font-size: 12px; color: var(--muted); }
#render-check[data-status="error"] { color: #b91c1c; font-weight: 600; }
"""

HEAD_SCRIPT = """
window.abgateErrors = [];
window.addEventListener("error", function (event) {
  window.abgateErrors.push(String(event.message));
  var check = document.getElementById("render-check");
  if (check) { check.setAttribute("data-status", "error");
    check.textContent = "Render check failed: " + event.message; }
});
"""

CHECK_SCRIPT = """
(function () {
  var check = document.getElementById("render-check");
  var plots = document.querySelectorAll("svg.plot");
  var expected = Number(check.getAttribute("data-expected"));
  var problems = window.abgateErrors.slice();
  if (plots.length !== expected) {
    problems.push(plots.length + " plots found, " + expected + " expected");
  }
  for (var i = 0; i < plots.length; i++) {
    var box = plots[i].getBBox();
    var marks = plots[i].querySelectorAll(".mark").length;
    if (!(box.width > 0 && box.height > 0) || marks === 0) {
      problems.push(plots[i].id + " drew nothing");
    }
  }
  // Layout: the labels of a plot (legend, reference-line tags, outlier labels) lie
  // inside it and clear of each other; tables that need a horizontal scroll at this
  // window width are listed (the test renders at 1400 px and wants none).
  for (var p = 0; p < plots.length; p++) {
    var vb = plots[p].viewBox.baseVal;
    var texts = plots[p].querySelectorAll("text:not([transform])");
    var boxes = [];
    for (var t = 0; t < texts.length; t++) {
      var b = texts[t].getBBox(), cls = texts[t].getAttribute("class") || "";
      var label = /legend|annot|reflabel/.test(cls);
      if (b.x < vb.x - 0.5 || b.y < vb.y - 0.5 || b.x + b.width > vb.x + vb.width + 0.5 ||
          b.y + b.height > vb.y + vb.height + 0.5) {
        problems.push(plots[p].id + ": text '" + texts[t].textContent + "' clipped");
      }
      for (var u = 0; u < boxes.length; u++) {
        var o = boxes[u];
        if ((label || o.label) && b.x < o.x + o.width - 0.5 && o.x < b.x + b.width - 0.5 &&
            b.y < o.y + o.height - 0.5 && o.y < b.y + b.height - 0.5) {
          problems.push(plots[p].id + ": '" + o.text + "' and '" +
                        texts[t].textContent + "' overlap");
        }
      }
      boxes.push({x: b.x, y: b.y, width: b.width, height: b.height, label: label,
                  text: texts[t].textContent});
    }
  }
  var wraps = document.querySelectorAll(".table-wrap");
  var wide = [];
  for (var w = 0; w < wraps.length; w++) {
    if (wraps[w].scrollWidth > wraps[w].clientWidth + 1) { wide.push(String(w)); }
  }
  check.setAttribute("data-overflowing-tables", wide.join(","));
  check.setAttribute("data-plots", String(plots.length));
  check.setAttribute("data-status", problems.length ? "error" : "ok");
  check.textContent = problems.length ? "Render check failed: " + problems.join("; ")
    : "Render check: all " + plots.length + " plots drawn.";
  if (problems.length) { console.error("abgate report: " + problems.join("; ")); }
})();
"""


def inline(text: str) -> str:
    """Escape ``text`` and turn its trusted ```code``` and ``**bold**`` into HTML
    (user spans escaped and never read as markup: ``untrusted.html_text``)."""
    return html_text(text)


def _cell(text: str, col: int, table: Table) -> str:
    if col in table.badge_cols and text in BADGES:
        return f'<td><span class="badge badge-{text}">{escape(text)}</span></td>'
    cls = "" if col in table.text_cols else ' class="num"'
    return f"<td{cls}>{inline(text)}</td>"


def _table(table: Table) -> str:
    head = "".join(f"<th>{inline(h)}</th>" for h in table.header)
    rows = "\n".join("<tr>" + "".join(_cell(t, k, table) for k, t in enumerate(row)) + "</tr>"
                     for row in table.rows)
    return (f'<div class="table-wrap"><table>\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{rows}\n</tbody></table></div>")


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        anchor = f' id="{escape(plain(block.anchor))}"' if block.anchor else ""
        return f"<h{block.level}{anchor}>{inline(block.text)}</h{block.level}>"
    if isinstance(block, Para):
        return f"<p>{inline(block.text)}</p>"
    if isinstance(block, Quote):
        lines = [escape(" ".join(line.split())) for line in plain_lines(block.text)]
        return ('<blockquote class="description"><p>'
                + "<br>\n".join(line for line in lines if line) + "</p></blockquote>")
    if isinstance(block, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{inline(i)}</li>" for i in block.items) + "\n</ul>"
    if isinstance(block, Table):
        return _table(block)
    assert isinstance(block, Plot)
    plot_id = escape(plain(block.plot_id))
    return (f'<figure class="figure" data-plot="{plot_id}">\n{block.svg}\n'
            f"<figcaption>{inline(block.caption)}</figcaption></figure>")


def _toc(doc: Doc) -> str:
    links = [f'<a href="#{escape(plain(b.anchor))}">{inline(b.text)}</a>' for b in doc.blocks
             if isinstance(b, Heading) and b.level == 2 and b.anchor]
    return '<nav class="toc">' + "".join(links) + "</nav>"


def render_html(doc: Doc) -> str:
    body = []
    for k, block in enumerate(doc.blocks):
        body.append(_block(block))
        if k == 0:  # after the title
            decision = escape(plain(doc.decision))
            body.append(f'<div class="banner {decision}">Decision: '
                        f"<strong>{decision}</strong></div>")
            body.append(_toc(doc))
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(plain(doc.title))}</title>",
        f"<style>{CSS}</style>",
        f"<script>{HEAD_SCRIPT}</script>",
        "</head>",
        "<body>",
        "<main>",
        *body,
        f'<p id="render-check" data-status="pending" data-expected="{len(doc.plots)}">'
        "Render check did not run (scripts disabled?).</p>",
        "</main>",
        f"<script>{CHECK_SCRIPT}</script>",
        "</body>",
        "</html>",
        "",
    ])
