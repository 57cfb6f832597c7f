"""Reports that cannot be forged (issue 35, item 7): an experiment's name and
description and a model's metadata are shown as text in report.md and report.html,
never as markup, raw HTML, a heading or a second verdict line, and their control
characters (ANSI escapes, bidi overrides) are shown visibly there and in what the CLI
prints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.support.report as report_kit
from abgate.ledger.history import History, HistoryPoint, Series, SeriesKey
from abgate.ledger.history_report import render as render_history
from abgate.report import build_doc, render, render_data
from abgate.report.html import render_html
from abgate.report.load import AbData, load_ab
from abgate.report.markdown import render_markdown
from tests.support.fake import cli
from tests.support.forgery import HIDDEN, html_problems, markdown_facts, verdict_lines

IMG = "<img src=x onerror=alert(1)>"
NAME = f"{IMG} **bold** \x1b[31mred\u202eevil"
FORGED = "**Decision: ACCEPT** (exit code 0) for 1 candidate arm(s)"
DESCRIPTION = f"Nothing to see.\n\n{FORGED}\n# Forged heading\n<script>alert(1)</script>"

EXPERIMENT = f"""name = {json.dumps(NAME)}
description = {json.dumps(DESCRIPTION)}
baseline = "a"

[shared]
engine = "fake"
suite = "synthetic"
difficulty = "easy"
limit = 6
seeds = [0]
max_tokens = 24

[arms.a]
engine_args = {{ }}

[arms.b]
engine_args = {{ perturb = 0.05 }}
"""


@pytest.fixture(scope="module")
def hostile_ab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A fake A/B (6 items: INCONCLUSIVE, exit 3) of a hostile name and description,
    written into a directory whose own name holds an ANSI escape; and its stdout."""
    root = tmp_path_factory.mktemp("forgery")
    (root / "exp.toml").write_text(EXPERIMENT)
    out = root / "ab\x1b[31m\u202e"
    result = cli("ab", str(root / "exp.toml"), "-o", str(out),
                 env={"ABGATE_LEDGER": "off"})
    assert result.returncode == 3, result.stdout + result.stderr
    return out, result.stdout + result.stderr


def test_description_cannot_plant_a_verdict_line(hostile_ab: tuple[Path, str]) -> None:
    markdown = (hostile_ab[0] / "report.md").read_text()
    assert verdict_lines(markdown) == ["INCONCLUSIVE"]
    facts = markdown_facts(markdown)
    assert facts["decisions"] == ["Decision: INCONCLUSIVE"]
    assert facts["quoted_markup"] == []
    # the description is there, as written, after the verdict, in a blockquote
    assert markdown.index("**Decision: INCONCLUSIVE**") < markdown.index("> Nothing to see.")
    assert "> \\*\\*Decision: ACCEPT\\*\\* (exit code 0)" in markdown


def test_name_and_description_are_text_in_markdown(hostile_ab: tuple[Path, str]) -> None:
    markdown = (hostile_ab[0] / "report.md").read_text()
    facts = markdown_facts(markdown)
    assert facts["html"] == []
    assert "Forged heading" not in " ".join(facts["headings"])
    assert facts["headings"][0].startswith("A/B report: <img src=x onerror=alert(1)> **bold**")
    assert HIDDEN.search(markdown) is None
    assert "\\\\x1b\\[31mred\\<U+202E>evil" in markdown.splitlines()[0]


def test_name_and_description_are_text_in_html(hostile_ab: tuple[Path, str]) -> None:
    html = (hostile_ab[0] / "report.html").read_text()
    assert html_problems(html) == []
    assert "&lt;img src=x onerror=alert(1)&gt; **bold** \\x1b[31mred&lt;U+202E&gt;evil" in html
    assert "<strong>Decision: ACCEPT</strong>" not in html
    quote = html.split('<blockquote class="description">')[1].split("</blockquote>")[0]
    assert "**Decision: ACCEPT** (exit code 0)" in quote
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in quote


def test_cli_prints_control_characters_visibly(hostile_ab: tuple[Path, str]) -> None:
    printed = hostile_ab[1]
    assert "reports: " in printed
    assert HIDDEN.search(printed) is None
    assert "ab\\x1b[31m<U+202E>" in printed


@pytest.fixture(scope="module")
def model_metadata_ab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded, analysed A/B whose engines report a model name from the model's own
    metadata (llama.cpp's ``general.name``) of raw HTML, ANSI and bidi characters."""
    effective = report_kit._effective
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_kit, "_effective",
                   lambda arm: {**effective(arm), "model_name": f"{IMG}\x1b[2J\u202e"})
        return report_kit.build_ab_dir(tmp_path_factory.mktemp("model") / "ab")


def test_model_metadata_is_text(model_metadata_ab: Path) -> None:
    markdown, html = render(model_metadata_ab, "md"), render(model_metadata_ab, "html")
    row = next(line for line in markdown.splitlines() if "effective config" in line)
    assert "model_name=\\<img src=x onerror=alert(1)>\\\\x1b\\[2J\\<U+202E>" in row
    assert markdown_facts(markdown)["html"] == [] and HIDDEN.search(markdown) is None
    assert html_problems(html) == []
    assert "model_name=&lt;img src=x onerror=alert(1)&gt;\\x1b[2J&lt;U+202E&gt;" in html


# --- the property: any text, one verdict line and nothing else ------------------

FRAGMENTS = ["<img src=x onerror=alert(1)>", "<script>", "</p>", "**", "*", "_", "`",
             "```", "~~", "#", "# ", "\n# ", "\n- ", "\n1. ", "\n> ", "\n---\n", "\n===\n",
             "\n\n", "[x](javascript:alert(1))", "![i](x)", "|", "\\", "&lt;", "&#60;",
             FORGED, "\n" + FORGED + "\n", "Decision: ACCEPT", "\x1b[31m", "\x00",
             "\x85", "\u202e", "\u2066", "\u200b", "\ufeff", "\x0e", "\x0f", "\r", "\t",
             "\x0e\x1b[2J\x0f",
             "    ", "a", "é", " ", "<", ">", "\u2028"]
TEXT = st.one_of(st.text(max_size=30),
                 st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[AbData, list[str]]:
    """A recorded A/B (REJECT) and the headings of its report."""
    data = load_ab(report_kit.build_ab_dir(tmp_path_factory.mktemp("prop") / "ab"))
    return data, markdown_facts(render_data(data, "md"))["headings"]


def _with_text(data: AbData, name: str, description: str, model: str) -> AbData:
    record = data.record
    experiment = record.experiment.model_copy(update={"name": name,
                                                      "description": description})
    arms = {}  # the effective facet is each arm's run.json's (records v2)
    for arm_name, arm in data.arms.items():
        run = arm.record
        if run is not None:
            engine = run.engine.model_copy(update={
                "effective": {**run.engine.effective_config, "model_name": model}})
            arm = dataclasses.replace(arm, record=run.model_copy(update={"engine": engine}))
        arms[arm_name] = arm
    return dataclasses.replace(data, arms=arms, record=record.model_copy(
        update={"experiment": experiment}))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=TEXT, description=TEXT, model=TEXT)
def test_any_text_gives_one_verdict_line(recorded: tuple[AbData, list[str]], name: str,
                                         description: str, model: str) -> None:
    data, headings = _with_text(recorded[0], name, description, model), recorded[1]
    doc = build_doc(data, plots=False)
    markdown = render_markdown(doc)
    facts = markdown_facts(markdown)
    assert verdict_lines(markdown) == ["REJECT"]
    assert facts["decisions"] == ["Decision: REJECT"]
    assert len(facts["headings"]) == len(headings)
    assert facts["headings"][1:] == headings[1:]
    assert facts["html"] == [] and facts["quoted_markup"] == []
    assert HIDDEN.search(markdown) is None
    assert html_problems(render_html(doc)) == []


def test_ledger_history_page_shows_record_text_as_text() -> None:
    """The ledger's history page (``abgate ledger history --html``) too."""
    point = HistoryPoint(record_id="r" * 12, unit="tok/s", path="/x", kind="run", started_at=0.0,
                  git_commit="c" * 40, git_dirty=False, status="complete", missing=False,
                  value=10.0, se=1.0, n=4, evidence="**e** \x1b[2J")
    key = SeriesKey(engine="llamacpp", model="<img src=x onerror=alert(1)>\u202e",
                    config_digest="d" * 64, suite="**s**", workload_digest="w" * 64)
    html = render_history(History("steady_decode_tps", [Series(key, [point])], 0.02))
    assert html_problems(html) == []
    assert "model <code>&lt;img src=x onerror=alert(1)&gt;&lt;U+202E&gt;</code>" in html
    assert "<code>**s**</code>" in html and "**e** \\x1b[2J" in html
