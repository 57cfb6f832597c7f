"""Distribution agreement in a four-arm A/B on the fake engine (the workflow of
tests/test_agreement_ab.py, moved from the engine tier): the baseline, an identical arm
(A/A), a small numeric change (``perturb`` below the fake's logit margin: the lossy
switch) and a broken one (past the margin: the broken RoPE), at the accuracy floor
(``accuracy = 0``: every arm answers every item wrong), so that only the distribution
gates can tell the broken arm. One A/B read four ways: the broken arm rejected by a
distribution gate, the lossy one not and the A/A arm at zero KLD, the scoring cost per
arm, and a lossless expectation rejecting the lossy arm on re-analysis. That llama.cpp's
own scores see a broken RoPE and a q8_0 KV cache the same way: the engine tier's
tests/test_agreement_ab.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from abgate.ab.analyze import analyze
from abgate.records.documents import AbRecord
from abgate.runner.documents import read_record
from tests.support.fake import cli
from tests.support.records import changed, edit_record

DISTRIBUTION_GATES = {"mean_kld", "top1_agreement"}
N_ITEMS = 40
POLICY = "[speed]\nmax_slowdown = 0.9\n"  # speed is not under test here
EXPERIMENT = f"""
name = "agreement"
baseline = "base"
policy = "POLICY"
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "easy"
limit = {N_ITEMS}
max_tokens = 32
engine_args = {{ accuracy = 0.0 }}
[schedule]
mode = "interleave"
warmup = 0
[evidence]
probes = false
[arms.base]
[arms.same]
[arms.lossy]
engine_args = {{ perturb = 0.3 }}
[arms.broken]
engine_args = {{ perturb = 4.0 }}
"""


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("agreement")
    (d / "policy.toml").write_text(POLICY)
    (d / "exp.toml").write_text(EXPERIMENT.replace("POLICY", str(d / "policy.toml")))
    r = cli("ab", str(d / "exp.toml"), "-o", str(d / "AB"))
    assert r.returncode == 1, r.stdout + r.stderr  # the broken arm decides: REJECT
    return d / "AB"


def _arm(ab_dir: Path, arm: str) -> dict[str, Any]:
    comp = json.loads((ab_dir / "comparison.json").read_text())
    return comp["comparisons"][arm]  # type: ignore[no-any-return]


def _failing(c: dict[str, Any]) -> set[str]:
    return {g["name"] for g in c["verdict"]["gates"] if g["outcome"] == "fail"}


def test_the_broken_arm_at_the_accuracy_floor_is_rejected_by_a_distribution_gate(
        ab_dir: Path) -> None:
    c = _arm(ab_dir, "broken")
    assert c["verdict"]["decision"] == "REJECT"
    assert _failing(c) & DISTRIBUTION_GATES, c["verdict"]["reasons"]
    assert "accuracy" not in _failing(c)  # both arms at the floor: accuracy cannot tell
    agreement = c["comparison"]["agreement"]
    assert agreement["measured"] and agreement["method"] == "full"
    assert agreement["n_items"] == N_ITEMS and not agreement["approximate"]
    assert c["verdict"]["reasons"][0].startswith("REJECT")  # names the deciding evidence


def test_the_lossy_arm_is_not_rejected_and_the_identical_arm_has_zero_kld(
        ab_dir: Path) -> None:
    lossy, same, broken = (_arm(ab_dir, a) for a in ("lossy", "same", "broken"))
    assert lossy["verdict"]["decision"] != "REJECT", lossy["verdict"]["reasons"]
    assert not _failing(lossy) & DISTRIBUTION_GATES
    assert same["verdict"]["decision"] == "INCONCLUSIVE", same["verdict"]["reasons"]
    agreement = same["comparison"]["agreement"]
    assert agreement["mean_kld"]["estimate"] == 0.0
    assert agreement["top1_agreement"]["estimate"] == 1.0
    lossy_kld = lossy["comparison"]["agreement"]["mean_kld"]["estimate"]
    broken_kld = broken["comparison"]["agreement"]["mean_kld"]["estimate"]
    assert 0.0 < lossy_kld < broken_kld / 10


def test_the_scoring_cost_is_recorded_per_arm(ab_dir: Path) -> None:
    ab = json.loads((ab_dir / "ab.json").read_text())
    for arm in ("base", "same", "lossy", "broken"):
        cost = ab["scoring"][arm]
        assert cost["method"] == "full" and cost["seconds"] > 0 and cost["n_tokens"] > 0
    cost = _arm(ab_dir, "lossy")["comparison"]["agreement"]["cost"]
    assert cost["lossy"]["generation_seconds"] > 0
    assert cost["lossy"]["scoring_over_generation"] > 0
    report = (ab_dir / "report.md").read_text()
    assert "KL" in report and "top-1" in report.lower()


def test_a_lossless_expectation_rejects_the_lossy_arm_on_reanalysis(ab_dir: Path,
                                                                    tmp_path: Path) -> None:
    lossless = tmp_path / "AB"
    shutil.copytree(ab_dir, lossless)
    ab = read_record(lossless / "ab.json", "ab", model=AbRecord)
    edit_record(lossless / "ab.json", experiment=changed(ab.experiment, expect="lossless"))
    result = analyze(lossless).to_json()
    lossy = result["comparisons"]["lossy"]
    assert lossy["verdict"]["decision"] == "REJECT"
    assert any(name.startswith("lossless") for name in _failing(lossy))
    assert result["comparisons"]["same"]["verdict"]["decision"] != "REJECT"
