"""``abgate ab`` end to end, the workflow on the fake engine: resume after SIGKILL, a
changed experiment refused, a broken arm rejected by a quality gate. The shipped example
on the real engine is run once, by the README's chain: tests/test_readme_examples.py
(``_check_the_example_ab``). Two identical arms: tests/fast/test_fake_workflows.py
``test_ab_a_a_is_exact`` (exit 3, the same outputs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import abgate, read_lines, wait_until
from tests.support.fake import cli

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
