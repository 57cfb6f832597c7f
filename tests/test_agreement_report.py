"""The A/B analysis reads fabricated agreement/probes/scoring records into
comparison.json, and the reports show them (no engine is run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abgate.ab.analyze import analyze
from abgate.compare import Comparison
from abgate.compare.agreement import not_measured
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import AbRecord
from abgate.report import build_doc, render, render_data
from abgate.report.agreement_sections import evidence_line
from abgate.report.blocks import Heading
from abgate.report.load import load_ab
from abgate.report.markdown import render_markdown
from abgate.runner.documents import read_record
from tests.support.agreement import (
    aa_rows,
    broken_rows,
    write_agreement,
    write_probes,
    write_scoring,
)
from tests.support.records import changed, edit_record
from tests.support.report import N_ITEMS, SEEDS, build_ab_dir

N_PLOTS = 2 + 3 * 2  # as in test_report.py, before the KL histograms


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_ab_dir(tmp_path_factory.mktemp("agreement") / "ab")
    write_agreement(out, "fast", aa_rows(N_ITEMS, SEEDS))
    write_agreement(out, "loopy", broken_rows(N_ITEMS, SEEDS))
    for arm, copy_ok in (("base", True), ("fast", True), ("loopy", False)):
        write_probes(out, arm, {"arithmetic": True, "copy": copy_ok, "needle": False})
    write_scoring(out, {"fast": {"seconds": 12.5, "n_tokens": 1600, "method": "full"},
                        "loopy": {"seconds": 14.0, "n_tokens": 1600, "method": "full"}})
    analyze(out, n_boot=500)
    return out


def _arm(out: Path, arm: str) -> dict[str, Any]:
    doc = json.loads((out / "comparison.json").read_text())
    entry = doc["comparisons"][arm]
    assert isinstance(entry, dict)
    return entry


def test_comparison_json_has_agreement_probes_and_cost(ab_dir: Path) -> None:
    fast = _arm(ab_dir, "fast")
    agreement = fast["comparison"]["agreement"]
    assert agreement["measured"] is True and agreement["mean_kld"]["estimate"] == 0.0
    assert agreement["n_keys"] == N_ITEMS * len(SEEDS)
    cost = agreement["cost"]["fast"]
    assert cost["scoring_seconds"] == 12.5 and cost["generation_seconds"] > 0
    assert cost["scoring_over_generation"] == pytest.approx(12.5 / cost["generation_seconds"])
    assert agreement["cost"]["base"]["scoring_seconds"] is None
    assert fast["comparison"]["expect"] == "lossy" and fast["comparison"]["speed_only"] is None
    assert fast["verdict"]["decision"] == "ACCEPT"
    statuses = {r["name"]: r["status"] for r in fast["comparison"]["probes"]["rows"]}
    assert statuses == {"arithmetic": "passes in both", "copy": "passes in both",
                        "needle": "fails in both"}


def test_terminal_evidence_line(ab_dir: Path) -> None:
    fast = _arm(ab_dir, "fast")["comparison"]
    line = evidence_line(Comparison.model_validate(fast), "fast")
    assert line is not None and line.startswith("distribution agreement (")
    assert "mean KLD 0 nats (95% CI 0 to 0)" in line and "top-1 agreement 100.0%" in line
    assert "scoring took" in line and "x this arm's generation time" in line
    unmeasured = Comparison(agreement=not_measured("x"))
    assert evidence_line(unmeasured, "fast") is None


def test_broken_arm_rejected_on_agreement_and_probe(ab_dir: Path) -> None:
    loopy = _arm(ab_dir, "loopy")["verdict"]
    failed = {g["name"] for g in loopy["gates"] if g["outcome"] == "fail"}
    assert {"mean_kld", "top1_agreement", "probe_copy"} <= failed
    assert loopy["reasons"][0].startswith("REJECT: distribution agreement: mean KLD ")


def test_markdown_shows_the_agreement_and_probes_sections(ab_dir: Path) -> None:
    markdown = render(ab_dir, "md")
    loopy = markdown.split("## loopy vs base")[1]
    assert "### Distribution agreement" in loopy
    assert "| Mean KLD (nats per token) |" in loopy
    assert "Positions with the largest KL" in loopy and "Items with the largest mean KLD" in loopy
    assert "| Top-1 agreement (same most likely token) | 33." in loopy
    assert "Scoring `loopy` took 14.0 s for 1600 tokens, against" in loopy
    assert "### Probes" in loopy and "| `copy` | pass | fail | regression |" in loopy
    # Accuracy is ~70%, far from the floor: agreement comes after the deltas.
    assert loopy.index("### Deltas") < loopy.index("### Distribution agreement")
    # The headline does not repeat the decision.
    assert "`loopy` vs `base`: **REJECT**: distribution agreement: mean KLD" in markdown
    # Top tokens of the largest-KL position: token IDs with probabilities.
    assert "#" in loopy.split("Positions with the largest KL")[1].split("\n\n")[1]


def test_html_draws_one_kl_histogram_per_scored_candidate(ab_dir: Path) -> None:
    html = render(ab_dir, "html")
    assert html.count('<svg class="plot"') == N_PLOTS + 2
    assert 'id="plot-kld-1"' in html and 'id="plot-kld-2"' in html
    assert f'data-expected="{N_PLOTS + 2}"' in html


def test_json_report_carries_the_agreement(ab_dir: Path) -> None:
    doc = json.loads(render(ab_dir, "json"))
    agreement = doc["comparison"]["comparisons"]["loopy"]["comparison"]["agreement"]
    assert agreement["measured"] is True and agreement["mean_kld"]["estimate"] > 1


def test_agreement_comes_first_when_accuracy_is_at_the_floor(ab_dir: Path) -> None:
    data = load_ab(ab_dir)
    comparison = json.loads((ab_dir / "comparison.json").read_text())
    acc = comparison["comparisons"]["loopy"]["comparison"]["quality"]["accuracy"]
    acc["a"]["estimate"], acc["b"]["estimate"] = 0.05, 0.025
    data.analysis = ComparisonDoc.model_validate(comparison)
    doc = build_doc(data, plots=False)
    headings = [b.text for b in doc.blocks if isinstance(b, Heading)]
    start = headings.index("loopy vs base")
    assert headings[start + 1] == "Distribution agreement"
    assert headings[start + 2].startswith("Deltas")
    assert "near the floor" in render_markdown(doc)
    fast = headings.index("fast vs base")
    assert headings[fast + 1].startswith("Deltas")


def test_missing_files_are_not_measured_never_a_crash(tmp_path: Path) -> None:
    out = build_ab_dir(tmp_path / "ab")  # no agreement.jsonl, no probes.json
    fast = _arm(out, "fast")
    agreement = fast["comparison"]["agreement"]
    assert agreement["measured"] is False
    assert "no agreement.jsonl for arm 'fast'" in agreement["reason"]
    assert "probes" not in fast["comparison"]
    assert not any(g["name"] == "mean_kld" for g in fast["verdict"]["gates"])
    assert fast["verdict"]["notes"][0].startswith("Distribution agreement not measured")
    markdown = render_data(load_ab(out), "md")
    assert "Not measured: no agreement.jsonl for arm 'fast'" in markdown
    assert "distribution agreement (KL divergence) was not measured" in markdown


def test_corrupt_files_are_not_measured_with_the_reason(tmp_path: Path) -> None:
    out = build_ab_dir(tmp_path / "ab")
    path = write_agreement(out, "fast", aa_rows(3))
    path.write_text("{not json\n" + path.read_text())
    (out / "arms" / "base" / "probes.json").write_text("{")
    write_probes(out, "fast", {"copy": True})
    write_scoring(out, {"loopy": {"error": "engine cannot return logprobs"}})
    analyze(out, n_boot=200)
    fast = _arm(out, "fast")["comparison"]
    assert fast["agreement"]["measured"] is False
    assert "unreadable" in fast["agreement"]["reason"]
    assert fast["probes"]["measured"] is False
    assert "probes.json of arm 'base' is unreadable" in fast["probes"]["reason"]
    loopy = _arm(out, "loopy")["comparison"]
    assert loopy["agreement"]["reason"] == "engine cannot return logprobs"
    render_data(load_ab(out), "html")  # renders


def test_random_weights_arm_is_speed_only(tmp_path: Path) -> None:
    out = build_ab_dir(tmp_path / "ab")
    arm = out / "arms" / "loopy" / "run.json"  # the arm's effective facet (records v2)
    run = json.loads(arm.read_text())
    run["engine"]["effective"]["load_format"] = "dummy"
    arm.write_text(json.dumps(run))
    write_agreement(out, "loopy", broken_rows(N_ITEMS))
    analyze(out, n_boot=200)
    loopy = _arm(out, "loopy")
    assert "random weights" in loopy["comparison"]["speed_only"]
    assert [g["name"] for g in loopy["verdict"]["gates"]] == ["sample_size", "speed"]
    assert loopy["verdict"]["decision"] == "ACCEPT"
    assert "Quality gates skipped" in render(out, "md")


def test_expect_lossless_reaches_the_verdict(tmp_path: Path) -> None:
    out = build_ab_dir(tmp_path / "ab")
    ab = read_record(out / "ab.json", "ab", model=AbRecord)
    edit_record(out / "ab.json", experiment=changed(ab.experiment, expect="lossless"))
    write_agreement(out, "fast", aa_rows(N_ITEMS, SEEDS))
    analyze(out, n_boot=200)
    fast = _arm(out, "fast")
    assert fast["comparison"]["expect"] == "lossless"
    gates = {g["name"]: g for g in fast["verdict"]["gates"]}
    # `fast` changes the tokens of items 3, 13, 23, 33 (both seeds): not lossless.
    assert gates["lossless_outputs"]["outcome"] == "fail"
    assert gates["lossless_outputs"]["observed"] == pytest.approx(8 / 80)
    assert gates["lossless_kld"]["outcome"] == "pass"
    assert fast["verdict"]["decision"] == "REJECT"
