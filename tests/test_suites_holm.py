"""Several suites, one verdict (issue 34 item 3): every [suites.NAME] runs as its own A/B
and one verdict over all their gates controls the family-wise error with Holm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.compare.holm import SuiteOutcome, combine, fail_p_value, holm_levels
from abgate.compare.policy import load_policy
from abgate.records.comparison import Accuracy, Comparison, Interval, Quality, Verdict
from abgate.records.result import Gate
from tests.support.fake import ACCEPT_ARGS, REJECT_ARGS, cli


def test_holm_step_down() -> None:
    # m = 4 at alpha 0.05: levels 0.0125, 0.0167, 0.025, 0.05 by rank
    out = holm_levels([0.04, 0.001, 0.02, 0.012], 0.05)
    assert [r for r, _, _ in out] == [4, 1, 3, 2]
    assert [rej for _, _, rej in out] == [True, True, True, True]
    # the step-down stops at the first p above its level, and so do all after it
    out = holm_levels([0.04, 0.001, 0.03, 0.012], 0.05)
    assert [rej for _, _, rej in out] == [False, True, False, True]


def _outcome(suite: str, estimate: float, se: float, alone: str) -> SuiteOutcome:
    """A suite whose accuracy fell by ``-estimate`` with ``se``, its gate ``alone``."""
    comparison = Comparison(n_items=100, quality=Quality(accuracy=Accuracy(
        diff=Interval(estimate=estimate, se=se))))
    gate = Gate("accuracy", "accuracy difference", -0.05, estimate, None, alone, "evidence.")
    verdict = Verdict(decision={"fail": "REJECT", "pass": "ACCEPT"}.get(alone, "INCONCLUSIVE"),
                      gates=(gate,))
    return SuiteOutcome(suite, "b", comparison, verdict, load_policy(None))


def test_a_gate_that_fails_alone_is_held_back_by_holm() -> None:
    policy = load_policy(None)  # margin 5 points, alpha 0.025
    # drop 10 points, SE 2.4: one-sided p of "drop beyond 5" ~ 0.0186 < 0.025 alone
    weak = _outcome("gsm8k", -0.10, 0.024, "fail")
    p = fail_p_value("accuracy", weak.comparison, policy)
    assert p is not None and 0.0125 < p < 0.025
    alone = combine([weak], 0.025)
    assert alone.decision == "REJECT" and alone.gates[0].holm_rejects
    # with a second suite's gate in the family its level halves: no longer a failure
    two = combine([weak, _outcome("synthetic", 0.0, 0.01, "pass")], 0.025)
    assert two.decision == "INCONCLUSIVE" and two.n_tests == 2
    held = next(g for g in two.gates if g.suite == "gsm8k")
    assert held.alone == "fail" and held.outcome == "inconclusive" and held.level == 0.0125
    assert any("fails alone" in r and "not after Holm" in r for r in two.reasons)
    assert "Holm step-down" in (two.method or "") and "0.025" in (two.method or "")
    # a clear failure stays one
    strong = combine([_outcome("gsm8k", -0.20, 0.02, "fail"),
                      _outcome("synthetic", 0.0, 0.01, "pass")], 0.025)
    assert strong.decision == "REJECT" and strong.reasons[0].startswith(
        "REJECT: suite gsm8k: accuracy:")


def _suites_file(path: Path, cand: str, qa: Path, *, gsm_policy: str = "",
                 bad_data: bool = False) -> Path:
    path.write_text(f"""name = "suites"
baseline = "a"

[shared]
engine = "fake"
suite = "synthetic"
limit = 30
seeds = [0]
max_tokens = 24

[schedule]
warmup = 1

[evidence]
agreement = false
probes = false

[arms.a]
[arms.b]
engine_args = {{ {cand} }}

[suites.easy]
suite = "synthetic"
difficulty = "easy"

[suites.medium]
suite = "synthetic"
difficulty = "medium"
{gsm_policy}

[suites.qa]
suite = "jsonl"
data = "{'missing.jsonl' if bad_data else qa.name}"
""")
    return path


def _qa(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Say {i}.",
                                        "answer": rf"answer is {i}\b", "scorer": "regex"})
                            + "\n" for i in range(30)))
    return path


@pytest.mark.parametrize(("cand", "decision", "code"), [(ACCEPT_ARGS, "ACCEPT", 0),
                                                        (REJECT_ARGS, "REJECT", 1)])
def test_three_suites_one_verdict(tmp_path: Path, cand: str, decision: str, code: int) -> None:
    exp = _suites_file(tmp_path / "s.toml", cand, _qa(tmp_path))
    out = tmp_path / "out"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == code, r.stdout + r.stderr
    doc = json.loads((out / "suites.json").read_text())
    verdict = doc["verdict"]
    assert verdict["decision"] == decision
    assert set(verdict["suites"]) == {"easy/b", "medium/b", "qa/b"}
    for name in ("easy", "medium", "qa"):  # each suite is a full A/B of its own
        assert (out / "suites" / name / "comparison.json").is_file()
    assert verdict["n_tests"] >= 12 and verdict["family_alpha"] == 0.025
    md = (out / "suites.md").read_text()
    assert f"{decision} over 3 suites" in md and "Holm step-down" in md
    assert "Holm step-down" in r.stdout and f"suites: {decision} over 3 suites" in r.stdout
    if decision == "REJECT":
        assert verdict["reasons"][0].startswith("REJECT: suite ")
        assert "Holm: p = " in verdict["reasons"][0]
    # every suite's gates carry the MDE its verdict had
    assert verdict["mde"]["easy/b"]["accuracy"] is not None


def test_per_suite_thresholds(tmp_path: Path) -> None:
    """A suite's own policy decides that suite: asking 'medium' for a 90% speedup leaves
    the accepted candidate INCONCLUSIVE there, so the one verdict is INCONCLUSIVE."""
    strict = tmp_path / "strict.toml"
    strict.write_text("[speed]\nmin_speedup = 0.9\n")
    exp = _suites_file(tmp_path / "s.toml", ACCEPT_ARGS, _qa(tmp_path),
                       gsm_policy='policy = "strict.toml"')
    out = tmp_path / "out"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 3, r.stdout + r.stderr
    verdict = json.loads((out / "suites.json").read_text())["verdict"]
    assert verdict["suites"] == {"easy/b": "ACCEPT", "medium/b": "INCONCLUSIVE",
                                 "qa/b": "ACCEPT"}
    assert any(reason.startswith("suite medium:") for reason in verdict["reasons"])
    medium = json.loads((out / "suites" / "medium" / "comparison.json").read_text())
    assert medium["policy"]["speed"]["min_speedup"] == 0.9


def test_bad_input_in_the_last_suite_is_refused_before_any_suite_runs(tmp_path: Path) -> None:
    exp = _suites_file(tmp_path / "s.toml", ACCEPT_ARGS, _qa(tmp_path), bad_data=True)
    out = tmp_path / "out"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 2 and "missing.jsonl" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_suites_and_sequential_stopping_are_refused(tmp_path: Path) -> None:
    exp = _suites_file(tmp_path / "s.toml", ACCEPT_ARGS, _qa(tmp_path))
    exp.write_text(exp.read_text().replace("[schedule]\n", "[schedule]\nstopping = "
                                           "\"sequential\"\n"))
    r = cli("ab", str(exp), "-o", str(tmp_path / "out"))
    assert r.returncode == 2 and "sequential" in r.stderr
