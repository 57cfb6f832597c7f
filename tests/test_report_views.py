"""The report's typed views of the free objects inside records: a malformed object reads
as empty (rendered n/a), never as a crash, and well-formed ones read by attribute."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from abgate.compare.policy import load_policy
from abgate.records.bench_sections import SpeedDistributions
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import AbRecord
from abgate.records.policy import Policy
from abgate.records.sections import Distribution
from abgate.records.side_documents import AbBenchCase, AbBenchDocument
from abgate.report import render
from abgate.report.fmt import NA
from abgate.report.views import (
    ArmSetting,
    WeightsDiff,
)
from abgate.runner.documents import read_record, write_record
from tests.support.records import changed, edit_record
from tests.support.report import build_ab_dir


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ab_dir(tmp_path_factory.mktemp("views") / "ab")


def test_the_recorded_policy_is_the_policy_model() -> None:
    """comparison.json's policy reads back as the Policy decide() applied (one model),
    and writes the same JSON as it was given."""
    policy = load_policy()
    doc = ComparisonDoc(policy=policy)
    again = ComparisonDoc.model_validate(json.loads(json.dumps(doc.to_json())))
    assert again.policy == policy and again.to_json() == doc.to_json()
    assert list(doc.to_json()["policy"]) == [f.name for f in fields(Policy)]
    assert ComparisonDoc().policy is None and "policy" not in ComparisonDoc().to_json()


def test_list_views_keep_only_objects_and_defaults_fill_missing_fields() -> None:
    assert ArmSetting.model_validate({}).limit == NA
    assert ArmSetting.model_validate({"limit": None}).limit is None


def test_weights_view_orders_the_worst_compared_tensors() -> None:
    diff = WeightsDiff.model_validate({"ref": None, "summary": {"overall": 7}, "tensors": [
        1, {"name": "a", "status": "compared", "rel_l2": 0.5},
        {"name": "b", "status": "compared", "rel_l2": 0.9},
        {"name": "c", "status": "skipped", "rel_l2": 2.0},
        {"name": "d", "status": "compared", "rel_l2": "big"}]})
    assert diff.ref.path == NA and diff.summary.overall.max_rel_l2 is None
    assert len(diff.tensors) == 4
    assert [t.name for t in diff.worst(5)] == ["b", "a"]
    assert [t.name for t in diff.worst(1)] == ["b"]


def test_malformed_weights_diff_and_bench_case_render_as_not_available(
        ab_dir: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "ab"
    shutil.copytree(ab_dir, out)
    (out / "weights-diff-x.json").write_text(json.dumps({"ref": None, "tensors": None,
                                                         "summary": "?"}))
    write_record(out / "arms" / "base" / "bench.json", AbBenchDocument.new(
        plan={"input_len": [512], "output_len": 128},
        cases=[AbBenchCase(input_len=512, output_len=128, prompt_sha256="0" * 64,
                           speed=SpeedDistributions(steady_decode_tps=Distribution()))]))
    md = render(out, "md")
    assert "## Weights: weights-diff-x.json (not this A/B's)" in md  # no model: marked
    assert f"Not shown: model sha256 {NA}, {NA} is no arm's model" in md
    assert f"| 512/128 | {NA} | {NA} |" in md
    assert render(out, "html") and render(out, "json")


def test_gpu_entries_in_setup_and_limits(ab_dir: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "ab"
    shutil.copytree(ab_dir, out)
    doc = read_record(out / "ab.json", "ab", model=AbRecord)
    edit_record(out / "ab.json", host=changed(doc.host, gpus=[{"name": "H200", "memory": 1},
                                                              "legacy text"]))
    md = render(out, "md")
    limits = md[md.index("## What this evidence does not certify"):]
    assert "Test CPU; H200). Speed on other hardware" in limits
    assert "legacy text" in md[:md.index("## What this evidence does not certify")]
