"""Anytime-valid sequential gates (pure): confidence sequences, their error rates under
continuous monitoring, and sequential decisions on synthetic samples."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from abgate.ab.checks import choose_mode
from abgate.ab.experiment import Experiment, parse_experiment
from abgate.cli.ab_cmd import _with_stopping
from abgate.compare import compare_samples, decide, load_policy
from abgate.compare.confseq import betting_bounds, mixture_bounds
from abgate.compare.sequential import sequential_section
from abgate.errors import UsageError
from tests.support.agreement import aa_rows, broken_rows, rows_for
from tests.support.compare import make_arm

POLICY = load_policy()


def order_of(samples: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(s["item_id"] for s in samples))


def test_betting_bounds_hold_under_continuous_monitoring() -> None:
    """Every look, 200 items, 300 replays per distribution: a bound that ever crosses
    the true mean is a false decision; Ville's inequality keeps each side <= alpha."""
    rng = np.random.default_rng(7)
    draws = {0.9: lambda: (rng.random(200) < 0.9) * 1.0, 2 / 7: lambda: rng.beta(2, 5, 200),
             0.05: lambda: (rng.random(200) < 0.05) * 1.0}
    for mean, draw in draws.items():
        low_miss = high_miss = 0
        for _ in range(300):
            low, high = betting_bounds(draw(), 0.025, grid=501)
            low_miss += bool((low > mean).any())
            high_miss += bool((high < mean).any())
        # 0.025 nominal; 300 replays: 0.05 is > 2.5 binomial SEs above it
        assert low_miss / 300 <= 0.05 and high_miss / 300 <= 0.05, (mean, low_miss, high_miss)


def test_betting_bounds_shrink_and_never_loosen() -> None:
    low, high = betting_bounds(np.full(100, 0.3), 0.025)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) <= 0)
    assert low[-1] <= 0.3 <= high[-1] and high[-1] - low[-1] < 0.15
    assert low[0] == 0.0 and high[0] == 1.0  # one observation proves nothing
    # a clearly broken arm: values at the top of the range separate from 0.2 in 3 looks
    low, _ = betting_bounds(np.ones(10), 0.025)
    assert int(np.argmax(low > 0.2)) + 1 <= 3


def test_betting_bounds_refuse_values_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        betting_bounds([0.5, 1.5], 0.025)
    with pytest.raises(ValueError, match="alpha"):
        betting_bounds([0.5], 1.5)


def test_mixture_bounds_error_rate_after_burn_in() -> None:
    rng = np.random.default_rng(3)
    misses = 0
    for _ in range(1000):
        low, high = mixture_bounds(rng.normal(0.0, 0.1, 150), 0.05, start=10)
        misses += bool(((low > 0) | (high < 0)).any())
        assert math.isinf(low[8]) and math.isinf(high[8])  # nothing before the burn-in
    assert misses / 1000 <= 0.07  # 0.05 nominal, asymptotic: measured 4.2%


def test_broken_arm_rejected_within_ten_items() -> None:
    a, b = make_arm(40, noise=0.05, rng_seed=1), make_arm(40, noise=0.05, rng_seed=2)
    sec = sequential_section(a, b, order_of(a), POLICY, agreement=broken_rows(40))
    assert sec.decision == "REJECT" and sec.stopped_early
    assert sec.stopped_at <= 10 and "mean_kld" in sec.decided_by
    assert sec.looks[-1].to_json() == {"n_items": sec.stopped_at, "decision": "REJECT"}
    comparison = compare_samples(a, b).with_extras(sequential=sec)
    verdict = decide(comparison, POLICY)
    assert verdict.decision == "REJECT"
    assert verdict.reasons[0].startswith("REJECT: distribution agreement: sequential mean_kld")
    assert f"stopped early after {sec.stopped_at} of at most 40 items" in verdict.notes[0]
    assert "0.025 per side at any stopping time" in verdict.notes[0]


def test_identical_arms_never_rejected_or_accepted() -> None:
    """A/A with real-looking speed noise: the sequential rule looks after every item
    and must not decide; the fixed-N tests, peeked at after every item from 10 on, do."""
    seq_decided = peek_decided = 0
    trials = 40
    rows = aa_rows(60)  # the same exact A/A rows every trial (read only)
    for trial in range(trials):
        a = make_arm(60, noise=0.08, rng_seed=2 * trial)
        b = make_arm(60, noise=0.08, rng_seed=2 * trial + 1)
        sec = sequential_section(a, b, order_of(a), POLICY, agreement=rows)
        seq_decided += sec.decision != "INCONCLUSIVE"
        assert sec.decision != "REJECT"
    peek_policy = load_policy()  # zero margins expose the raw peeking inflation
    peek_policy = dataclasses.replace(peek_policy, min_items=2, speed=dataclasses.replace(
        peek_policy.speed, min_speedup=0.0, max_slowdown=0.0))
    for trial in range(trials):
        a = make_arm(60, noise=0.08, rng_seed=2 * trial)
        b = make_arm(60, noise=0.08, rng_seed=2 * trial + 1)
        for n in range(10, 61, 5):
            verdict = decide(compare_samples(a[:n], b[:n], n_boot=200), peek_policy)
            if verdict.decision != "INCONCLUSIVE":
                peek_decided += 1
                break
    assert seq_decided == 0
    assert peek_decided / trials > 0.05  # naive peeking inflates the 5% error


def test_slowdown_rejected_by_speed_after_burn_in() -> None:
    a = make_arm(40, tps=100.0, noise=0.05, rng_seed=1)
    b = make_arm(40, tps=70.0, noise=0.05, rng_seed=2)
    sec = sequential_section(a, b, order_of(a), POLICY, agreement=aa_rows(40))
    assert sec.decision == "REJECT" and sec.decided_by == ("speed",)
    assert sec.stopped_at == POLICY.sequential.speed_burn_in


def test_real_speedup_accepted_when_every_gate_passes() -> None:
    """Identical outputs and 30% faster: every gate passes, the last one decides. The
    2-point rate margins need about 230 items with zero differences (any valid bound
    does: 0.98^n <= 0.025 alone needs 183)."""
    n = 300
    a = make_arm(n, noise=0.05, rng_seed=1)
    b = make_arm(n, tps=130.0, noise=0.05, rng_seed=2)
    sec = sequential_section(a, b, order_of(a), POLICY, agreement=aa_rows(n), look_every=10)
    assert sec.decision == "ACCEPT" and sec.stopped_early
    assert 183 <= sec.stopped_at < n and sec.stopped_at % 10 == 0
    assert set(sec.decided_by) <= {"invalid_rate", "truncated_rate", "error_rate",
                                      "repetition"}
    gates = {g.name: g for g in sec.gates}
    assert gates["speed"].outcome == "pass" and gates["mean_kld"].outcome == "pass"


def test_decisions_are_a_pure_function_of_the_samples() -> None:
    """Resume: evaluating the prefix the A/B stopped at gives the same looks; more items
    after a stop change nothing up to the stop."""
    a, b = make_arm(40, noise=0.05, rng_seed=1), make_arm(40, noise=0.05, rng_seed=2)
    rows = broken_rows(40)
    full = sequential_section(a, b, order_of(a), POLICY, agreement=rows, max_items=40)
    stop = full.stopped_at
    prefix = sequential_section(a[:stop], b[:stop], order_of(a), POLICY,
                                agreement=rows[:stop], max_items=40)
    assert prefix.n_items_run == stop
    assert prefix.model_copy(update={"n_items_run": 40}) == full
    again = sequential_section(a, b, order_of(a), POLICY, agreement=rows, max_items=40)
    assert again == full


def test_look_every_and_max_items() -> None:
    a, b = make_arm(12, noise=0.05, rng_seed=1), make_arm(12, noise=0.05, rng_seed=2)
    sec = sequential_section(a, b, order_of(a), POLICY, agreement=aa_rows(12), look_every=5,
                             max_items=12)
    assert [look.n_items for look in sec.looks] == [5, 10, 12]
    assert sec.decision == "INCONCLUSIVE" and sec.stopped_at is None
    assert not sec.stopped_early and sec.n_items == 12
    partial = sequential_section(a[:7], b[:7], order_of(a), POLICY, look_every=5,
                                 max_items=12)
    assert [look.n_items for look in partial.looks] == [5]  # 12 not reached yet
    with pytest.raises(ValueError, match="look_every"):
        sequential_section(a, b, order_of(a), POLICY, look_every=0)


def test_kld_clip_only_lowers_values() -> None:
    """A per-item KLD above the clip counts as the clip: the fail side stays valid."""
    a, b = make_arm(20), make_arm(20)
    rows = rows_for(range(20), kl=30.0)
    sec = sequential_section(a, b, order_of(a), POLICY, agreement=rows)
    kld = next(g for g in sec.gates if g.name == "mean_kld")
    assert kld.outcome == "fail" and kld.observed == POLICY.sequential.kld_clip


def test_policy_sequential_section_validated(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[sequential]\nspeed_burn_in = 1\n")
    with pytest.raises(UsageError, match=r"p.toml:2: sequential.speed_burn_in must be"):
        load_policy(path)
    path.write_text("[sequential]\nkld_clp = 1.0\n")
    with pytest.raises(UsageError, match="did you mean 'kld_clip'"):
        load_policy(path)
    path.write_text("[sequential]\nkld_clip = 2.0\n")
    assert load_policy(path).sequential.kld_clip == 2.0


def _doc(**schedule: Any) -> dict[str, Any]:
    return {"shared": {"suite": "synthetic", "limit": 4}, "schedule": schedule,
            "arms": {"a": {}, "b": {"engine_args": {"flash_attn": True}}}}


def test_schedule_stopping_keys_parsed_and_refused_clearly() -> None:
    exp = parse_experiment(_doc(stopping="sequential", max_items=30, look_every=5), "x.toml")
    assert exp.schedule.sequential and exp.schedule.max_items == 30
    assert exp.to_dict()["schedule"]["stopping"] == "sequential"
    assert Experiment.from_dict(exp.to_dict()).schedule == exp.schedule
    fixed = parse_experiment(_doc(), "x.toml")
    assert "stopping" not in fixed.to_dict()["schedule"]  # old digests stay the same
    bad = {(("stopping", "sequentail"),): "did you mean 'sequential'",
           (("stopping", "sequential"), ("max_items", 0)): "max_items must be >= 1",
           (("stopping", "sequential"), ("look_every", 0)): "look_every must be >= 1",
           (("max_items", 10),): "apply only with stopping = \"sequential\"",
           (("stopping", "sequential"), ("look_every", "2")): "'look_every' must be int"}
    for pairs, message in bad.items():
        with pytest.raises(UsageError, match=re.escape(message)):
            parse_experiment(_doc(**dict(pairs)), "x.toml")


def test_sequential_needs_the_interleaved_schedule() -> None:
    exp = parse_experiment(_doc(stopping="sequential", mode="blocks"), "x.toml")
    with pytest.raises(UsageError, match="needs the interleaved schedule"):
        choose_mode(exp)
    served = parse_experiment({**_doc(stopping="sequential"), "arms": {
        "a": {"env": {"X": "1"}}, "b": {}}}, "x.toml")
    with pytest.raises(UsageError, match="auto chose blocks"):
        choose_mode(served)
    assert choose_mode(parse_experiment(_doc(stopping="sequential"), "x.toml")) == "interleave"


def test_cli_flags_set_the_stopping_rule() -> None:
    exp = parse_experiment(_doc(), "x.toml")
    seq = _with_stopping(exp, True, 12, 3).schedule
    assert (seq.stopping, seq.max_items, seq.look_every) == ("sequential", 12, 3)
    assert _with_stopping(exp, None, None, None) is exp
    back = _with_stopping(replace(exp, schedule=seq), False, None, None).schedule
    assert (back.stopping, back.max_items, back.look_every) == ("fixed", None, 1)
    with pytest.raises(UsageError, match="apply only to a sequential A/B"):
        _with_stopping(exp, None, 12, None)
    with pytest.raises(UsageError, match="look_every must be >= 1"):
        _with_stopping(exp, True, None, 0)
