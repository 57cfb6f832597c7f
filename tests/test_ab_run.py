"""``abgate ab`` end to end: the shipped example on the real engine (which gates a change
trips, the accuracies and the tokens are figures of this CPU's SIMD paths and thread
count, so it asserts decisions and relations that hold on any host); the workflow
(resume after SIGKILL, a changed experiment refused, a broken arm rejected by a quality
gate) on the fake engine. Two identical arms: tests/fast/test_fake_workflows.py
``test_ab_a_a_is_exact`` (exit 3, the same outputs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, abgate, read_lines, toml_engine_args, wait_until
from tests.support.fake import cli

EXAMPLE = REPO / "examples" / "smollm2-kv-q8.toml"
# The gates that judge quality (any of them may be the one a broken arm trips).
QUALITY_GATES = {"accuracy", "invalid_rate", "truncated_rate", "error_rate", "repetition"}
AA = """
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "trivial"
limit = 3
max_tokens = 32
engine_args = { n_ctx = 512, hang_at = 8, hang_s = 600.0 }
[schedule]
warmup = 1
[arms.a1]
[arms.a2]
"""


def measured(path: Path) -> list[dict[str, object]]:
    return [s for s in read_lines(path) if not s["warmup"]]


def example(tmp_path: Path) -> Path:
    """The shipped example, with ABGATE_TEST_THREADS (if set) in its shared engine args."""
    text = EXAMPLE.read_text()
    shared = "engine_args = { n_ctx = 1024 }"
    assert text.count(shared) == 1
    copy = tmp_path / EXAMPLE.name
    copy.write_text(text.replace(shared, f"engine_args = {toml_engine_args({'n_ctx': 1024})}"))
    return copy


@pytest.mark.engine
def test_example_ab_small(tmp_path: Path) -> None:
    out = tmp_path / "AB"
    r = abgate("ab", str(example(tmp_path)), "-o", str(out), "--limit", "3", "--max-tokens",
               "32", "--warmup", "1")
    assert r.returncode == 3, r.stderr  # 3 items cannot decide anything: INCONCLUSIVE
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "complete" and ab["schedule"]["mode"] == "interleave"
    executed = ab["schedule"]["executed"]
    assert [e.split(":")[0] for e in executed] == ["f16", "q8", "q8", "f16", "f16", "q8"]
    for arm, type_k in (("q8", "q8_0"), ("f16", "f16")):  # the arm's effective facet
        run = json.loads((out / "arms" / arm / "run.json").read_text())
        assert run["engine"]["effective"]["type_k"] == type_k
    for arm in ("f16", "q8"):
        lines = read_lines(out / "arms" / arm / "samples.jsonl")
        assert sum(1 for s in lines if s["warmup"]) == 1 and len(lines) == 4
        assert json.loads((out / "arms" / arm / "run.json").read_text())["kind"] == "ab-arm"
    a = measured(out / "arms" / "f16" / "samples.jsonl")
    b = measured(out / "arms" / "q8" / "samples.jsonl")
    assert [s["prompt"]["sha256"] for s in a] == [s["prompt"]["sha256"] for s in b]
    comp = json.loads((out / "comparison.json").read_text())
    assert comp["decision"] == "INCONCLUSIVE" and comp["exit_code"] == 3
    assert comp["comparisons"]["q8"]["comparison"]["n_pairs"] == 3
    # progress on a non-terminal stderr: the samples, then the scoring pass
    lines = r.stderr.splitlines()
    assert any(x.startswith("abgate: ab AB: 6/6 (100%), ") for x in lines), r.stderr
    assert any(x.startswith("abgate: ab AB scoring q8 against f16: 3/3 (100%), ")
               for x in lines), r.stderr


def test_ab_resumes_after_sigkill(tmp_path: Path) -> None:
    """Killed while its 8th request hangs (3 lines of arm a2 written: its warm-up and 2
    samples); the resumed process serves fewer than 8, so it finishes."""
    exp = tmp_path / "aa.toml"
    exp.write_text(AA.replace("limit = 3", "limit = 5"))
    out = tmp_path / "AB"
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "ab", str(exp), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = out / "arms" / "a2" / "samples.jsonl"
    wait_until(lambda: target.exists() and target.read_text().count("\n") >= 3, proc,
               "3 samples of arm a2")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    r = abgate("ab", "--resume", str(out))
    assert r.returncode == 3, r.stderr
    for arm in ("a1", "a2"):
        keys = [s["key"] for s in measured(out / "arms" / arm / "samples.jsonl")]
        assert len(keys) == 5 and len(set(keys)) == 5
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "complete" and len(ab["resumes"]) == 1


def test_resume_refuses_changed_experiment(tmp_path: Path) -> None:
    exp = tmp_path / "aa.toml"
    exp.write_text(AA.replace("limit = 3", "limit = 1"))
    out = tmp_path / "AB"
    assert cli("ab", str(exp), "-o", str(out)).returncode == 3
    exp.write_text(AA.replace("limit = 3", "limit = 2"))
    r = cli("ab", str(exp), "--resume", str(out))
    assert r.returncode == 2 and "differs" in r.stderr


def test_flags_without_difference_are_refused(tmp_path: Path) -> None:
    r = cli("ab", "-o", str(tmp_path / "X"))
    assert r.returncode == 2 and "nothing differs" in r.stderr


def test_degraded_arm_is_rejected(tmp_path: Path) -> None:
    """An arm that wrecks the model (on llama.cpp: RoPE base 1.0; here the fake's numeric
    change past its logit margin) is REJECTED whatever its speed, by a quality gate:
    12 items under a policy that decides from 12 (the default needs 30)."""
    exp = tmp_path / "bad.toml"
    exp.write_text(BROKEN)
    (tmp_path / "policy.toml").write_text(f"min_items = {BROKEN_ITEMS}\n")
    # the timeout only guards against a hang; how long this takes is the host's business
    r = cli("ab", str(exp), "-o", str(tmp_path / "BAD"))
    assert r.returncode == 1, r.stdout + r.stderr
    comp = json.loads((tmp_path / "BAD" / "comparison.json").read_text())
    assert comp["decision"] == "REJECT"
    verdict = comp["comparisons"]["broken"]["verdict"]
    assert verdict["policy"]["min_items"] == BROKEN_ITEMS
    assert comp["comparisons"]["broken"]["comparison"]["n_items"] == BROKEN_ITEMS
    gates = verdict["gates"]
    assert {g["name"] for g in gates} >= QUALITY_GATES
    failed = {g["name"] for g in gates if g["outcome"] == "fail"}
    assert failed & QUALITY_GATES, gates


BROKEN_ITEMS = 12
BROKEN = f"""
policy = "policy.toml"
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "trivial"
limit = {BROKEN_ITEMS}
max_tokens = 192
[schedule]
warmup = 1
[arms.good]
[arms.broken]
engine_args = {{ perturb = 4.0 }}
"""
