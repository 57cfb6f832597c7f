"""The engine session's bookkeeping on the fake engine (were engine-tier tests on
llama.cpp in tests/test_engine_session.py; the session code is the same for every
engine): each arm's env applied around its own calls in a forced interleave and
restored after, and SIGTERM during a bench recorded as an interruption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abgate.ab.experiment import Evidence, Experiment, Schedule
from abgate.ab.workflow import run_experiment
from abgate.runner.spec import RunConfig
from tests.conftest import read_lines


def test_env_is_isolated_per_arm_in_forced_interleave_and_restored(tmp_path: Path) -> None:
    shared = RunConfig(engine="fake", suite="synthetic", difficulty="trivial", limit=2,
                       max_tokens=4)
    seen_env: list[tuple[str | None, str | None]] = []
    exp = Experiment(name="env", baseline="A", schedule=Schedule("interleave", 0, 8),
                     arms={"A": RunConfig(**{**vars(shared), "env": {"ABGATE_T_ARM": "a"}}),
                           "B": RunConfig(**{**vars(shared), "env": {"ABGATE_T_ARM": "b",
                                                                     "ABGATE_T_ONLY_B": "1"}})},
                     evidence=Evidence(agreement=False, probes=False))
    assert "ABGATE_T_ARM" not in os.environ

    from abgate.engines.base import GenerationResult
    from abgate.engines.fake import FakeCall
    from tests.support.fake import use_handler

    def note(call: FakeCall) -> GenerationResult | None:
        seen_env.append((os.environ.get("ABGATE_T_ARM"), os.environ.get("ABGATE_T_ONLY_B")))
        return None

    with use_handler(note):
        result = run_experiment(exp, tmp_path / "AB")
    assert result.outcome.status == "complete"
    # interleaved: both arms resident, each request under its own arm's env only
    assert sorted(set(seen_env)) == [("a", None), ("b", "1")] and len(seen_env) == 4
    seen = {arm: json.loads((tmp_path / "AB" / "arms" / arm / "run.json").read_text())
            ["provenance"]["environment"]["env"] for arm in ("A", "B")}
    assert seen["A"]["ABGATE_T_ARM"] == "a" and seen["A"].get("ABGATE_T_ONLY_B") is None
    assert seen["B"]["ABGATE_T_ARM"] == "b" and seen["B"]["ABGATE_T_ONLY_B"] == "1"
    assert "ABGATE_T_ARM" not in os.environ and "ABGATE_T_ONLY_B" not in os.environ
    runs = [json.loads((tmp_path / "AB" / "arms" / a / "run.json").read_text()) for a in "AB"]
    assert all(r["engine_processes"] == [os.getpid()] for r in runs)  # in-process engine


def test_sigterm_during_bench_is_interrupted_with_run_log(tmp_path: Path) -> None:
    """SIGTERM while the bench's second request runs (it sleeps 2 s for real): exit 130,
    run.json and summary.json ``interrupted``, and run.log says so."""
    out = tmp_path / "B"
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "bench", "--engine", "fake",
                             "--input-len", "32", "--output-len", "16", "--repeats", "200",
                             "--warmup", "0", "--peak-bw", "10", "--engine-arg", "hang_at=2",
                             "--engine-arg", "hang_s=2.0", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        samples = out / "samples.jsonl"
        if samples.exists() and read_lines(samples):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("bench wrote no sample in 120 s")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted" and run["ended_at"] is not None
    assert (out / "run.log").exists() and "interrupted" in (out / "run.log").read_text()
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert len(read_lines(out / "samples.jsonl")) < 200
