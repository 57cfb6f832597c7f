"""Gates on direct evidence (distribution agreement, lossless mode, probes), their
policy keys, the experiment's ``expect`` key, and honest wording of the verdict."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from abgate.ab.experiment import Experiment, parse_experiment
from abgate.compare import Comparison, Gate, Verdict, compare_samples, decide, load_policy
from abgate.compare.agreement import not_measured, summarize_agreement
from abgate.compare.probes import compare_probes
from abgate.errors import UsageError
from tests.support.agreement import aa_rows, broken_rows, rows_for
from tests.support.compare import make_arm, make_sample


def comparison(a: list[dict[str, Any]], b: list[dict[str, Any]], **extra: Any
               ) -> Comparison:
    return compare_samples(a, b, n_boot=500).with_extras(**extra)


def gate(result: Verdict, name: str) -> Gate:
    return next(g for g in result.gates if g.name == name)


def names(result: Verdict) -> list[str]:
    return [g.name for g in result.gates]


def floor_arms() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """40 zero-shot items at the model's floor: 2 right under A, 1 under B, and the
    broken B stops earlier (fewer truncations), as in the issue."""
    a = make_arm(40, correct_items={0, 1}, noise=0.05)
    b = make_arm(40, correct_items={5}, noise=0.05, rng_seed=1, tps=101.0, tokens=30)
    return a, b


def test_broken_arm_at_the_accuracy_floor_is_rejected_by_kld() -> None:
    a, b = floor_arms()
    plain = decide(comparison(a, b), load_policy(None))
    assert plain.decision == "INCONCLUSIVE"  # what accuracy alone can say
    assert gate(plain, "accuracy").outcome == "inconclusive"
    result = decide(comparison(a, b, agreement=summarize_agreement(broken_rows(40))),
                    load_policy(None))
    assert result.decision == "REJECT"
    assert gate(result, "accuracy").outcome == "inconclusive"
    kld, top1 = gate(result, "mean_kld"), gate(result, "top1_agreement")
    assert kld.outcome == "fail" and top1.outcome == "fail"
    assert kld.ci[0] > 0.1 and kld.observed == pytest.approx(2.0, rel=0.1)
    assert result.reasons[0].startswith("REJECT: distribution agreement: mean KLD ")
    assert "exceeds the allowed 0.1 nats" in result.reasons[0]
    assert "is below the required 85.00%" in result.reasons[1]


def test_identical_arms_pass_the_agreement_gates_and_can_be_accepted() -> None:
    a = make_arm(40, accuracy=0.5, noise=0.05)
    b = make_arm(40, accuracy=0.5, noise=0.05, rng_seed=1, tps=125.0)
    result = decide(comparison(a, b, agreement=summarize_agreement(aa_rows(40))),
                    load_policy(None))
    assert result.decision == "ACCEPT"
    assert gate(result, "mean_kld").outcome == "pass"
    assert gate(result, "top1_agreement").outcome == "pass"
    assert result.reasons[0].startswith("ACCEPT: speed: ")
    assert "mean_kld, top1_agreement" in result.reasons[1]


def test_kld_near_the_limit_is_inconclusive_with_items_needed() -> None:
    a = make_arm(40, noise=0.05)
    rows = rows_for(range(40), kl=lambda i, p: 0.19 if i % 2 else 0.02)  # mean 0.105
    result = decide(comparison(a, a, agreement=summarize_agreement(rows)), load_policy(None))
    kld = gate(result, "mean_kld")
    assert kld.outcome == "inconclusive"
    assert "cannot rule out exceeding the allowed 0.1 nats" in kld.evidence
    assert kld.more_items_needed is not None or kld.out_of_reach


def test_agreement_gates_are_held_back_below_min_items() -> None:
    a = make_arm(40, noise=0.05)
    result = decide(comparison(a, a, agreement=summarize_agreement(broken_rows(10))),
                    load_policy(None))
    kld = gate(result, "mean_kld")
    assert kld.outcome == "inconclusive"
    assert "it would fail, but 10 items < min_items 30" in kld.evidence
    assert result.decision == "INCONCLUSIVE"


def test_approximate_kld_is_labelled_in_the_evidence() -> None:
    a = make_arm(40, noise=0.05)
    rows = rows_for(range(40), method="top_k", k=20, kl=0.001)
    kld = gate(decide(comparison(a, a, agreement=summarize_agreement(rows)),
                      load_policy(None)), "mean_kld")
    assert kld.outcome == "pass"
    assert "top-k approximation (k=20), a lower bound of the full KL" in kld.evidence


def test_missing_agreement_is_noted_and_its_gates_are_absent() -> None:
    a = make_arm(40, noise=0.05)
    result = decide(comparison(a, a, agreement=not_measured("no agreement.jsonl")),
                    load_policy(None))
    assert "mean_kld" not in names(result) and "top1_agreement" not in names(result)
    assert result.notes == ("Distribution agreement not measured: no agreement.jsonl; "
                            "its gates are absent.",)
    assert result.to_json()["notes"] == list(result.notes)


def test_lossless_rejects_divergent_outputs() -> None:
    a = make_arm(40, noise=0.05)
    b = make_arm(40, noise=0.05, rng_seed=1, tps=130.0)
    b[3] = make_sample(3, token_ids=[1, 2, 3], tps=130.0)
    lossy = decide(comparison(a, b), load_policy(None))
    assert lossy.decision == "ACCEPT" and "lossless_outputs" not in names(lossy)
    result = decide(comparison(a, b, expect="lossless"), load_policy(None))
    assert result.decision == "REJECT"
    assert gate(result, "lossless_outputs").observed == pytest.approx(1 / 40)
    assert result.reasons[0].startswith("REJECT: lossless outputs: expect = lossless: 1 of 40")


def test_lossless_rejects_kld_above_the_noise_level(tmp_path: Path) -> None:
    a = make_arm(40, noise=0.05)
    b = make_arm(40, noise=0.05, rng_seed=1, tps=130.0)
    noisy = summarize_agreement(rows_for(range(40), kl=1e-3))
    result = decide(comparison(a, b, expect="lossless", agreement=noisy), load_policy(None))
    assert gate(result, "lossless_outputs").outcome == "pass"
    assert gate(result, "lossless_kld").outcome == "fail"
    assert gate(result, "mean_kld").outcome == "pass"  # fine for a lossy switch
    assert result.decision == "REJECT"
    exact = summarize_agreement(aa_rows(40))
    assert decide(comparison(a, b, expect="lossless", agreement=exact),
                  load_policy(None)).decision == "ACCEPT"
    path = tmp_path / "loose.toml"
    path.write_text("[lossless]\nmax_mean_kld = 0.01\nmax_divergent_fraction = 0.05\n")
    assert decide(comparison(a, b, expect="lossless", agreement=noisy),
                  load_policy(path)).decision == "ACCEPT"


def test_probe_regression_rejects_and_failing_in_both_is_only_reported() -> None:
    a = make_arm(40, noise=0.05)
    b = make_arm(40, noise=0.05, rng_seed=1, tps=130.0)
    base = {"probes": [{"name": "copy", "passed": True, "reason": "ok"},
                       {"name": "needle", "passed": False, "reason": "key not found"},
                       {"name": "arithmetic", "passed": True, "reason": "ok"}]}
    cand = {"probes": [{"name": "copy", "passed": False, "reason": "record garbled"},
                       {"name": "needle", "passed": False, "reason": "key not found"},
                       {"name": "arithmetic", "passed": True, "reason": "ok"}]}
    result = decide(comparison(a, b, probes=compare_probes(base, cand)), load_policy(None))
    assert result.decision == "REJECT"
    assert gate(result, "probe_copy").outcome == "fail"
    assert gate(result, "probe_arithmetic").outcome == "pass"
    assert "probe_needle" not in names(result)
    assert result.reasons[0] == ("REJECT: probe: probe copy passes under A but fails under B: "
                                 "record garbled.")
    assert any("failing in both arms" in n and "needle" in n for n in result.notes)
    same = decide(comparison(a, b, probes=compare_probes(base, base)), load_policy(None))
    assert same.decision == "ACCEPT"


def test_unusable_probes_are_noted_not_fatal() -> None:
    a = make_arm(40, noise=0.05)
    probes = compare_probes({"probes": "nope"}, None, cand_missing="no probes.json")
    result = decide(comparison(a, a, probes=probes), load_policy(None))
    assert not any(n.startswith("probe_") for n in names(result))
    assert result.notes == ("Probes not compared: baseline: no 'probes' list.",)


def test_random_weights_arm_is_judged_on_speed_only() -> None:
    a = make_arm(40, accuracy=0.6, noise=0.05)
    b = make_arm(40, accuracy=0.0, noise=0.05, rng_seed=1, tps=130.0)
    extra = {"speed_only": "arm 'B' runs random weights (load_format = \"dummy\"), speed only",
             "agreement": summarize_agreement(broken_rows(40))}
    result = decide(comparison(a, b, **extra), load_policy(None))
    assert names(result) == ["sample_size", "speed"]
    assert result.decision == "ACCEPT"
    assert result.notes[0].startswith("Quality gates skipped: arm 'B' runs random weights")


def test_out_of_reach_needs_are_not_printed_as_a_number() -> None:
    a = make_arm(40, seeds=2, correct_items=set(range(0, 24)), noise=0.05)
    b = make_arm(40, seeds=2, correct_items=set(range(3, 26)), noise=0.05, rng_seed=1,
                 tps=150.0)
    result = decide(comparison(a, b), load_policy(None))
    accuracy = gate(result, "accuracy")
    assert accuracy.outcome == "inconclusive"
    assert accuracy.out_of_reach is True and accuracy.more_items_needed is None
    assert result.more_samples_needed is None
    assert ("Out of reach at this effect size: settling accuracy would take more than 10x "
            "this run's 40 items.") in result.reasons
    assert not any(r.startswith("About ") for r in result.reasons)


def test_per_arm_accuracy_intervals_stay_inside_zero_and_one() -> None:
    a = make_arm(40, correct_items=set(), noise=0.05)
    b = make_arm(40, correct_items={7}, noise=0.05, rng_seed=1)
    acc = compare_samples(a, b).quality.accuracy
    for arm in ("a", "b"):
        side = getattr(acc, arm)
        low, high = side.ci
        assert 0.0 <= low <= side.estimate <= high <= 1.0
        assert side.ci_method == "wilson"
    assert acc.a.ci[1] > 0.05  # zero successes still leave a real upper bound
    # The normal interval of 1/40 would go below 0.
    assert acc.b.estimate - 1.96 * acc.b.se < 0 < acc.b.ci[0] + 1e-12


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_policy_defaults_for_the_new_keys() -> None:
    policy = load_policy(None)
    assert policy.quality.max_mean_kld == 0.1
    assert policy.quality.min_top1_agreement == 0.85
    assert policy.lossless.max_divergent_fraction == 0.0
    assert policy.lossless.max_mean_kld == 1e-4
    recorded = Verdict(policy=policy).to_json()["policy"]  # as a verdict records it
    assert recorded["lossless"] == {"max_divergent_fraction": 0.0, "max_mean_kld": 1e-4}


def test_policy_overrides_new_keys(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, "[quality]\nmax_mean_kld = 0.2\n\n[lossless]\n"
                                         "max_divergent_fraction = 0.1\n"))
    assert policy.quality.max_mean_kld == 0.2 and policy.quality.min_top1_agreement == 0.85
    assert policy.lossless == dataclasses.replace(load_policy(None).lossless,
                                                  max_divergent_fraction=0.1)


@pytest.mark.parametrize(("text", "expected"), [
    ("[quality]\nalpha = 0.025\nmax_mean_kld = -1\n",
     r":3: quality.max_mean_kld must be a number >= 0, got -1"),
    ('[quality]\nmin_top1_agreement = "high"\n',
     r":2: quality.min_top1_agreement must be a number in \[0, 1\]"),
    ("[lossless]\n\nmax_divergent_fraction = 2\n",
     r":3: lossless.max_divergent_fraction must be a number in \[0, 1\], got 2"),
    ("[quality]\nmax_mean_kld = 0.1\n[lossless]\nmax_mean_kdl = 0\n",
     r":4: unknown key 'lossless.max_mean_kdl' \(did you mean 'max_mean_kld'\?\)"),
    ("[losless]\nmax_mean_kld = 0\n", r":1: unknown key 'losless' .*'lossless'"),
])
def test_new_policy_keys_are_checked_with_file_and_line(tmp_path: Path, text: str,
                                                        expected: str) -> None:
    with pytest.raises(UsageError, match=expected):
        load_policy(write(tmp_path, text))


EXPERIMENT: dict[str, Any] = {"shared": {"suite": "synthetic", "limit": 3},
                              "arms": {"a": {}, "b": {"engine_args": {"flash_attn": True}}}}


def test_experiment_expect_key() -> None:
    default = parse_experiment(EXPERIMENT, "exp.toml")
    assert default.expect == "lossy" and "expect" not in default.to_dict()
    exp = parse_experiment({**EXPERIMENT, "expect": "lossless"}, "exp.toml")
    assert exp.expect == "lossless" and exp.to_dict()["expect"] == "lossless"
    assert Experiment.from_dict(exp.to_dict()).expect == "lossless"
    assert Experiment.from_dict(default.to_dict()).expect == "lossy"
    with pytest.raises(UsageError, match=r"^exp.toml: expect 'losless' is not one of lossy, "
                                         r"lossless \(did you mean 'lossless'"):
        parse_experiment({**EXPERIMENT, "expect": "losless"}, "exp.toml")
    with pytest.raises(UsageError, match="'expect' must be str"):
        parse_experiment({**EXPERIMENT, "expect": True}, "exp.toml")


def test_experiment_agreement_tokens_key() -> None:
    assert parse_experiment(EXPERIMENT, "exp.toml").evidence.agreement_tokens == 64
    exp = parse_experiment({**EXPERIMENT, "evidence": {"agreement_tokens": 0}}, "exp.toml")
    assert exp.evidence.agreement_tokens == 0  # every output token
    assert Experiment.from_dict(exp.to_dict()).evidence.agreement_tokens == 0
    with pytest.raises(UsageError, match=r"agreement_tokens must be >= 0"):
        parse_experiment({**EXPERIMENT, "evidence": {"agreement_tokens": -1}}, "exp.toml")
    with pytest.raises(UsageError, match=r"agreement_token.*did you mean 'agreement_tokens'"):
        parse_experiment({**EXPERIMENT, "evidence": {"agreement_token": 8}}, "exp.toml")


def test_every_new_gate_reads_as_one_sentence() -> None:
    a, b = floor_arms()
    base = {"probes": [{"name": "copy", "passed": True, "reason": "ok"}]}
    cand = {"probes": [{"name": "copy", "passed": False, "reason": "garbled"}]}
    result = decide(comparison(a, b, expect="lossless", probes=compare_probes(base, cand),
                               agreement=summarize_agreement(broken_rows(40))),
                    load_policy(None))
    for g in result.gates:
        assert g.evidence.endswith(".") and "\n" not in g.evidence
        assert g.observed is None or math.isfinite(g.observed)
    assert {"mean_kld", "top1_agreement", "lossless_outputs", "lossless_kld",
            "probe_copy"} <= set(names(result))
