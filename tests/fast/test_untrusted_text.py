"""The escaping kit of the reports (``report.untrusted``) and the CLI (``visible``),
piece by piece: what each format makes of a user span."""

from __future__ import annotations

from abgate.cli.render import markup, shown
from abgate.report.blocks import Doc, Para, Quote, Table
from abgate.report.html import render_html
from abgate.report.markdown import render_markdown
from abgate.report.untrusted import html_text, md_text, plain, unmarked, user
from abgate.visible import visible
from tests.support.forgery import markdown_facts


def test_visible_shows_control_bidi_and_zero_width_characters() -> None:
    assert visible("a\x1b[31mb\x00\x7f\x85") == "a\\x1b[31mb\\x00\\x7f\\x85"
    assert visible("x\u202ey\u2066z\u200b\ufeff\u2028") == (
        "x<U+202E>y<U+2066>z<U+200B><U+FEFF><U+2028>")
    assert visible("line\nnext\ttab", keep="\n") == "line\nnext\\x09tab"
    assert visible("naïve café 日本") == "naïve café 日本"


def test_user_spans_cannot_be_forged_or_nested() -> None:
    forged = "\x0e\x1b[2J\x0f"  # the sentinels themselves, in data
    assert plain(user(forged)) == "\\x0e\\x1b[2J\\x0f"
    # data that reached a block unmarked: its "span" is escaped and made visible too
    assert md_text("x" + forged) == "x\\\\x1b\\[2J"
    assert unmarked({"k": [user("<x>")]}) == {"k": ["<x>"]}


def test_markdown_escapes_user_text_outside_and_inside_code() -> None:
    assert md_text(f"**bold** {user('*x* <b> #1 [l](u) ~s~ | &amp;')}") == (
        "**bold** \\*x\\* \\<b> \\#1 \\[l](u) \\~s\\~ \\| \\&amp;")
    # inside a trusted code span the text is literal; a backtick in it lengthens the fence
    assert md_text(f"`{user('a*b')}`") == "`a*b`"
    assert md_text(f"`{user('a`b')}`") == "``a`b``"
    assert md_text(f"`{user('`x')}`") == "`` `x ``"
    assert md_text(f"`{user('a|b')}`", table=True) == "`a\\|b`"
    # what would start a block at the start of a line
    assert md_text(user("- item")) == "\\- item"
    assert md_text(user("1. item")) == "1\\. item"
    assert md_text(user("# h")) == "\\# h"


def test_markdown_table_cells_and_quotes_stay_in_their_block() -> None:
    doc = Doc("t", "n/a", [Table(("a", "b"), ((user("x | y\nz"), user("`c`")),)),
                           Quote(user("one\n\n# two\n---\n> three")), Para("after")])
    markdown = render_markdown(doc)
    facts = markdown_facts(markdown)
    assert facts["headings"] == [] and facts["quoted_markup"] == []
    assert "| x \\| y z | \\`c\\` |" in markdown
    assert "> one\\\n> \\# two\\\n> \\---\\\n> \\> three\n\nafter" in markdown


def test_html_never_reads_user_text_as_markup() -> None:
    assert html_text(f"**ok** {user('**no** `code` <i>')}") == (
        "<strong>ok</strong> **no** `code` &lt;i&gt;")
    assert html_text(f"`{user('<b>')}`") == "<code>&lt;b&gt;</code>"
    page = render_html(Doc(user("<t>\x1b"), "n/a", [Quote(user("a\n<b>"))]))
    assert "<title>&lt;t&gt;\\x1b</title>" in page
    assert '<blockquote class="description"><p>a<br>\n&lt;b&gt;</p></blockquote>' in page


def test_cli_text_is_visible_and_markup_escaped() -> None:
    assert shown("dir\x1b[2J\u202e") == "dir\\x1b[2J<U+202E>"
    assert markup("[bold]x\x1b") == "\\[bold]x\\x1b"

