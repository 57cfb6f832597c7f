"""The shipped ``fast-path`` policy (issue 24, item 5): accuracy and output health
decide, identity and length never reject alone, speed must improve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from abgate.compare import Comparison, Verdict, compare_samples, decide, load_policy
from abgate.compare.agreement import summarize_agreement
from abgate.errors import UsageError
from tests.support.agreement import broken_rows
from tests.support.compare import make_arm


def comparison(a: list[dict[str, Any]], b: list[dict[str, Any]], **extra: Any
               ) -> Comparison:
    return compare_samples(a, b, n_boot=500).with_extras(**extra)


def outcomes(result: Verdict) -> dict[str, str]:
    return {g.name: g.outcome for g in result.gates}


def diverged(tps: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A faster B whose outputs all differ in tokens and length, answers unchanged."""
    a = make_arm(40, accuracy=0.5, noise=0.05)
    b = make_arm(40, accuracy=0.5, noise=0.05, rng_seed=1, tps=tps, tokens=80)
    return a, b


def test_fast_path_is_shipped_and_named() -> None:
    policy = load_policy("fast-path")
    assert policy.name == "fast-path" and policy.source == "abgate:policies/fast-path.toml"
    assert policy.diagnostics.decide is False
    assert policy.speed.min_speedup == 0.0 and policy.speed.max_slowdown == 0.0
    default = load_policy(None)
    assert policy.quality == default.quality  # the quality margins are the default's
    assert load_policy("default").sha256 == default.sha256


def test_identity_and_length_never_reject_a_task_accurate_speedup() -> None:
    a, b = diverged(tps=110.0)
    strict = load_policy(None)
    strict = type(strict)(**{**strict.__dict__, "diagnostics": type(strict.diagnostics)(
        min_identical_fraction=1.0, max_mean_abs_length_change=4.0)})
    assert decide(comparison(a, b), strict).decision == "REJECT"  # identity would reject
    result = decide(comparison(a, b, expect="lossless"), load_policy("fast-path"))
    assert result.decision == "ACCEPT", result.reasons
    assert not {"identical_outputs", "length_change", "lossless_outputs"} & set(outcomes(result))
    assert any("Reported, not deciding" in n and "0 of 40" in n for n in result.notes)
    assert any("lossless fail" in n for n in result.notes)


def test_accuracy_and_health_still_decide() -> None:
    a = make_arm(60, accuracy=0.6, noise=0.05)
    worse = make_arm(60, accuracy=0.2, noise=0.05, rng_seed=1, tps=130.0)
    result = decide(comparison(a, worse), load_policy("fast-path"))
    assert result.decision == "REJECT" and outcomes(result)["accuracy"] == "fail"
    looping = make_arm(60, accuracy=0.6, noise=0.05, rng_seed=1, tps=130.0, rep=0.6)
    result = decide(comparison(a, looping), load_policy("fast-path"))
    assert result.decision == "REJECT" and outcomes(result)["repetition"] == "fail"
    broken = decide(comparison(a, make_arm(60, accuracy=0.6, noise=0.05, rng_seed=1,
                                           tps=130.0),
                               agreement=summarize_agreement(broken_rows(60))),
                    load_policy("fast-path"))
    assert broken.decision == "REJECT" and outcomes(broken)["mean_kld"] == "fail"


def test_speed_must_improve() -> None:
    a, same_speed = diverged(tps=100.0)
    result = decide(comparison(a, same_speed), load_policy("fast-path"))
    assert result.decision == "INCONCLUSIVE" and outcomes(result)["speed"] == "inconclusive"
    _, slower = diverged(tps=90.0)
    result = decide(comparison(a, slower), load_policy("fast-path"))
    assert result.decision == "REJECT" and outcomes(result)["speed"] == "fail"
    _, barely = diverged(tps=103.0)  # +3% (CI from +1.2%): fast-path accepts, not the default
    assert decide(comparison(a, barely), load_policy("fast-path")).decision == "ACCEPT"
    assert decide(comparison(a, barely), load_policy(None)).decision != "ACCEPT"


def test_decide_false_with_a_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[diagnostics]\ndecide = false\nmin_identical_fraction = 1.0\n")
    with pytest.raises(UsageError, match=r"p.toml:3: diagnostics.decide = false with a limit"):
        load_policy(path)
    path.write_text("[diagnostics]\ndecide = 1\n")
    with pytest.raises(UsageError, match=r"p.toml:2: diagnostics.decide must be true or false"):
        load_policy(path)


def test_a_file_named_like_a_shipped_policy_wins(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fast-path").write_text('name = "mine"\n')
    assert load_policy("fast-path").name == "mine"
