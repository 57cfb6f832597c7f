"""The shipped no-slower policy (issue 34 item 6): "as good and no slower", a speed
non-inferiority margin of 5%. A no-op is ACCEPTED on a steady host, INCONCLUSIVE (with
the reason) on a host too noisy to tell, and only a shown slowdown beyond 5% REJECTs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.compare.gates import speed_gate
from abgate.compare.policy import load_policy
from abgate.records.comparison import Bootstrap, Comparison, LogRatio, SpeedMetric
from tests.support.fake import cli, experiment


def test_no_slower_is_shipped() -> None:
    policy = load_policy("no-slower")
    assert policy.name == "no-slower"
    assert policy.speed.min_speedup == -0.05 and policy.speed.max_slowdown == 0.05
    assert policy.quality == load_policy(None).quality  # "as good": the default gates


@pytest.mark.parametrize(("cand", "decision", "code", "words"), [
    # a no-op on a steady host: the interval rules out a 5% slowdown
    ("tpot_ms = 5.0", "ACCEPT", 0, "no slower than the tolerated -5.0%"),
    # a real 30% slowdown is shown beyond the margin
    ("tpot_ms = 6.5", "REJECT", 1, "slower than a on steady decode tok/s"),
])
def test_as_good_and_no_slower(tmp_path: Path, cand: str, decision: str, code: int,
                               words: str) -> None:
    exp = experiment(tmp_path / "e.toml", cand, limit=30, agreement=False)
    exp.write_text(exp.read_text().replace('name = "fake-ab"',
                                           'name = "fake-ab"\npolicy = "no-slower"'))
    out = tmp_path / "out"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == code, r.stdout + r.stderr
    verdict = json.loads((out / "comparison.json").read_text())["comparisons"]["b"]["verdict"]
    assert verdict["decision"] == decision
    speed = next(g for g in verdict["gates"] if g["name"] == "speed")
    assert words in speed["evidence"]


def _noisy(estimate: float, half: float) -> Comparison:
    """A comparison whose per-item speed ratios spread widely (a busy host)."""
    return Comparison(n_items=40, bootstrap=Bootstrap(confidence=0.95), speed={
        "steady_decode_tps": SpeedMetric(
            higher_is_better=True, n_pairs=40, n_items=40,
            log_ratio=LogRatio(estimate=estimate, se=half / 1.96, sd=half / 1.96 * 40 ** 0.5,
                               ci=(estimate - half, estimate + half)))})


@pytest.mark.parametrize(("estimate", "half", "outcome"), [
    (0.0, 0.20, "inconclusive"),   # a no-op on a noisy host: neither shown nor ruled out
    (-0.01, 0.03, "pass"),         # a no-op on a quiet one
    (-0.30, 0.10, "fail"),         # a 26% slowdown, shown
])
def test_the_speed_gate_is_a_non_inferiority_test(estimate: float, half: float,
                                                  outcome: str) -> None:
    gate = speed_gate(_noisy(estimate, half), load_policy("no-slower"))
    assert gate.outcome == outcome
    if outcome == "inconclusive":
        assert "can neither rule out nor show a slowdown beyond" in gate.evidence
