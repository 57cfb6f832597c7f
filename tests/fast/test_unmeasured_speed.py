"""Speed explanations only from measurements (issue 35, item 9): when no item has a
finite timing in both arms (NaN, inf, missing), the speed gate is ``unmeasured`` and
says so once, plainly, with no claim about more samples or the host; timings left out
of a measured gate are counted in its evidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abgate.compare import compare_samples, decide, load_policy
from abgate.records.comparison import Verdict
from tests.support.compare import make_arm
from tests.support.fake import cli, fake_run

NAN = float("nan")


def _verdict(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> Verdict:
    policy = load_policy(None)
    comparison = compare_samples(a, b, n_boot=200, confidence=policy.speed.confidence)
    return decide(comparison, policy)


def _timed(arm: list[dict[str, Any]], value: float | None) -> list[dict[str, Any]]:
    for s in arm:
        s["timing"]["steady_decode_tps"] = value
    return arm


def _speed(v: Verdict) -> Any:
    return next(g for g in v.gates if g.name == "speed")


def _all_text(v: Verdict) -> str:
    return "\n".join([*v.reasons, v.explanation or "", *(g.evidence for g in v.gates)])


def _no_false_claims(v: Verdict) -> None:
    text = _all_text(v).lower()
    for claim in ("more samples", "measured on 0", "host", "not settle", "n/a is not"):
        assert claim not in text, (claim, text)


@pytest.mark.parametrize("value, why", [(NAN, "60 samples had NaN timings"),
                                        (float("inf"), "60 samples had infinite timings"),
                                        (None, "60 samples had no timing"),
                                        (0.0, "60 samples had a zero or negative timing")])
def test_unmeasured_speed_is_said_once_and_plainly(value: float | None, why: str) -> None:
    a, b = _timed(make_arm(30, accuracy=0.9), value), _timed(make_arm(30, accuracy=0.9), value)
    v = _verdict(a, b)
    gate = _speed(v)
    assert gate.outcome == "unmeasured" and gate.observed is None and gate.ci is None
    assert gate.evidence == ("steady decode tok/s unmeasured \u2014 no item had a finite "
                             f"decode time in both arms ({why}).")
    assert v.decision == "INCONCLUSIVE" and v.exit_code == 3
    assert v.more_samples_needed is None
    assert sum("unmeasured" in r for r in v.reasons) == 1
    assert v.explanation is not None
    assert "speed: steady decode tok/s unmeasured \u2014 no item" in v.explanation
    _no_false_claims(v)


def test_unmeasured_speed_with_open_quality_gates_claims_no_sample_count() -> None:
    """Quality gates that more items would settle do not make an unmeasured speed look
    settleable: no "about N more samples would let every open gate decide"."""
    a, b = make_arm(30, accuracy=0.6, tps=NAN), make_arm(30, accuracy=0.5, tps=NAN)
    v = _verdict(a, b)
    assert _speed(v).outcome == "unmeasured"
    assert v.more_samples_needed is None
    _no_false_claims(v)


def test_nan_in_one_arm_only_is_unmeasured_and_counts_that_arm() -> None:
    v = _verdict(make_arm(30, tps=100.0), make_arm(30, tps=NAN))
    assert _speed(v).outcome == "unmeasured"
    assert "(30 samples had NaN timings)" in _speed(v).evidence


def test_some_nan_timings_are_left_out_and_counted() -> None:
    a, b = make_arm(30, tps=100.0, noise=0.02), make_arm(30, tps=100.0, noise=0.02, rng_seed=1)
    for s in b[:4]:
        s["timing"]["steady_decode_tps"] = NAN
    gate = _speed(_verdict(a, b))
    assert gate.outcome != "unmeasured"
    assert "26 items; left out: 4 samples had NaN timings)" in gate.evidence


def test_one_measured_item_is_too_few_not_unsettleable() -> None:
    a, b = make_arm(30, tps=100.0), make_arm(30, tps=100.0)
    for s in a[1:]:
        s["timing"]["steady_decode_tps"] = None
    v = _verdict(a, b)
    assert "measured on only 1 item: too few for an interval" in _speed(v).evidence
    assert not any("would not settle speed" in r for r in v.reasons)


def test_compare_of_runs_with_nan_timings_says_unmeasured(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        assert fake_run(run, limit=10, seeds="0").returncode == 0
        path = run / "samples.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for s in lines:
            s["timing"] = {k: NAN for k in s["timing"]}
        path.write_text("".join(json.dumps(s) + "\n" for s in lines))  # NaN, as json writes
    out = tmp_path / "cmp.json"
    r = cli("compare", *map(str, runs), "-o", str(out), env={"ABGATE_LEDGER": "off"})
    assert r.returncode == 3, r.stderr
    assert ("steady decode tok/s unmeasured \u2014 no item had a finite decode time in both "
            "arms (20 samples had NaN timings)") in r.stdout
    for claim in ("measured on 0", "More samples", "more samples"):
        assert claim not in r.stdout
    doc = json.loads(out.read_text())
    assert doc["comparison"]["speed"]["steady_decode_tps"]["unmeasured_samples"] == {"nan": 20}
    explanation = doc["verdict"]["explanation"]
    assert "speed: steady decode tok/s unmeasured" in explanation
    assert "host" not in explanation and "more samples" not in explanation
