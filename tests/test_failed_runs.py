"""A run or an A/B arm in which every sample is an engine error has measured nothing:
it ends ``failed``, exit 1, with the first error in the message (issue 26, item 6).
The engine is the real ``openai`` adapter; the fault server makes every request fail
(HTTP 400), which a real server does only for a bad setup. The CLI runs in this process
(``tests.support.fake.cli``, as the console script runs it)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import error_lines, read_lines
from tests.support.fake import cli
from tests.support.fault_server import FaultServer


def test_run_whose_samples_all_failed_is_a_failure(tmp_path: Path) -> None:
    out = tmp_path / "R"
    with FaultServer(default="400") as fs:
        r = cli("run", "--engine", "openai", "--endpoint", fs.url, "--suite", "synthetic",
                "--limit", "3", "--max-tokens", "4", "-o", str(out))
    assert r.returncode == 1, r.stderr
    line = error_lines(r.stderr)
    assert len(line) == 1 and "every sample (3) is an engine error" in line[0], r.stderr
    assert "HTTP 400" in line[0] and "Traceback" not in r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and "HTTP 400" in run["error"]
    assert len(read_lines(out / "samples.jsonl")) == 3  # the samples are kept
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


def test_run_with_some_errors_still_completes(tmp_path: Path) -> None:
    out = tmp_path / "R"
    with FaultServer(script=["ok", "400", "ok"]) as fs:
        r = cli("run", "--engine", "openai", "--endpoint", fs.url, "--suite", "synthetic",
                "--limit", "3", "--max-tokens", "4", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


def test_ab_arm_whose_samples_all_failed_fails_the_ab(tmp_path: Path) -> None:
    with FaultServer(default="400") as fs:
        exp = tmp_path / "exp.toml"
        exp.write_text(f"""baseline = "a"
[shared]
engine = "openai"
suite = "synthetic"
limit = 2
max_tokens = 4
engine_options = {{ endpoints = ["{fs.url}"] }}
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
[arms.a]
[arms.b]
""")
        r = cli("ab", str(exp), "-o", str(tmp_path / "AB"))
    assert r.returncode == 1, r.stderr
    assert "every sample (2) is an engine error" in r.stderr and "HTTP 400" in r.stderr
    assert len(error_lines(r.stderr)) == 1, r.stderr
    ab = json.loads((tmp_path / "AB" / "ab.json").read_text())
    assert ab["status"] == "failed"
    assert not (tmp_path / "AB" / "comparison.json").exists()
