"""Kill anywhere: ``abgate run`` and ``abgate ab`` SIGKILLed at random points (while
samples are written, while finalising, during start-up), then resumed (and the resume
itself killed at random), end with every (item, seed) exactly once per arm, no corrupt
file, and the same outputs and quality summary as an uninterrupted run. The engine is
the ``openai`` client against the fault server's canned tokens (a text fixed per
prompt), so a trial costs processes, not a model: no real engine is loaded, so both tests
are the fast tier's (not marked ``engine``). ``abgate baseline record`` killed anywhere: on
the fake engine.

ABGATE_CHAOS_TRIALS=N runs N trials per command (default 2, for CI) from seed
ABGATE_CHAOS_SEED."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HANG_S, read_lines
from tests.support.fake import cli
from tests.support.fault_server import FaultServer

TRIALS = int(os.environ.get("ABGATE_CHAOS_TRIALS", "2"))
SEED = int(os.environ.get("ABGATE_CHAOS_SEED", "13"))
N_ITEMS, SEEDS = 8, (0, 1)

EXPERIMENT = """name = "chaos"
baseline = "a"
[shared]
engine = "openai"
suite = "synthetic"
limit = {n}
seeds = [0, 1]
max_tokens = 8
engine_options = {{ endpoints = ["{url}"], request_timeout = 60.0 }}
[schedule]
warmup = 0
[arms.a]
[arms.b]
"""


@dataclass
class Workload:
    """One command under test: how to start and resume it, where its samples go."""

    name: str
    url: str
    tmp: Path

    def start(self, out: Path) -> list[str]:
        if self.name == "run":
            return ["run", "--engine", "openai", "--endpoint", self.url, "--suite",
                    "synthetic", "--limit", str(N_ITEMS), "--seeds", "0,1", "--max-tokens",
                    "8", "--request-timeout", "60", "-o", str(out)]
        exp = self.tmp / "experiment.toml"
        exp.write_text(EXPERIMENT.format(n=N_ITEMS, url=self.url))
        return ["ab", str(exp), "-o", str(out)]

    def record(self, out: Path) -> Path:
        return out / ("run.json" if self.name == "run" else "ab.json")

    def sample_files(self, out: Path) -> list[Path]:
        if self.name == "run":
            return [out / "samples.jsonl"]
        return [out / "arms" / arm / "samples.jsonl" for arm in ("a", "b")]

    @property
    def total(self) -> int:
        return N_ITEMS * len(SEEDS) * (1 if self.name == "run" else 2)

    def complete(self, out: Path) -> bool:
        path = self.record(out)
        if not path.exists() or json.loads(path.read_text())["status"] != "complete":
            return False
        return self.name == "run" or (out / "comparison.json").exists()


def _done_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _run_killed(w: Workload, args: list[str], out: Path,
                kill: tuple[int, float] | None) -> int | None:
    """Run the CLI; with ``kill = (k, s)``, SIGKILL it ``s`` seconds after ``k`` sample
    lines are complete (k = -1: ``s`` seconds after start), if it is still running then.
    The exit code, or None when it was killed."""
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill is not None:
        k, jitter = kill
        deadline = time.monotonic() + HANG_S
        while k >= 0 and proc.poll() is None and time.monotonic() < deadline and \
                sum(_done_lines(p) for p in w.sample_files(out)) < k:
            time.sleep(0.005)
        time.sleep(jitter)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
            return None
    _, err = proc.communicate(timeout=HANG_S)
    # finished, failed cleanly, or (ab) an A/B decision; never a traceback
    assert proc.returncode in (0, 1, 3), err
    assert "Traceback" not in err, err
    return proc.returncode


def _kill_point(rng: random.Random, total: int) -> tuple[int, float]:
    """Mostly while samples are being written (after k of them, plus up to 30 ms: a
    sample's request, its write, the summary); sometimes during start-up or loading."""
    if rng.random() < 0.2:
        return -1, rng.uniform(0.2, 4.0)
    return rng.randrange(0, total), rng.uniform(0.0, 0.03)


def _samples(w: Workload, out: Path) -> dict[str, dict[str, Any]]:
    """Every sample by arm/key; each line must parse and each key appear once."""
    found: dict[str, dict[str, Any]] = {}
    for path in w.sample_files(out):
        for s in read_lines(path):
            key = s["key"] if w.name == "run" else f"{path.parent.name}/{s['key']}"
            assert key not in found, f"{key} recorded twice"
            found[key] = s
    return found


def _quality(w: Workload, out: Path) -> Any:
    if w.name == "run":
        return json.loads((out / "summary.json").read_text())["quality"]
    comparison = json.loads((out / "comparison.json").read_text())
    return {arm: (c["comparison"]["n_pairs"], c["comparison"]["quality"])
            for arm, c in comparison["comparisons"].items()}


@pytest.mark.parametrize("command", ["run", "ab"])
@pytest.mark.cost(6)
def test_kill_anywhere_then_resume(tmp_path: Path, command: str) -> None:
    """``abgate run`` and ``abgate ab``, each killed anywhere and resumed (two tests, so
    that two workers run them at once)."""
    rng = random.Random(SEED)
    with FaultServer(vary=True) as fs:
        w = Workload(command, fs.url, tmp_path)
        ref = tmp_path / "ref"
        # the uninterrupted reference: the CLI in this process (nothing to kill)
        done = cli(*w.start(ref))
        assert done.returncode in (0, 3) and "Traceback" not in done.stderr, done.stderr
        reference = _samples(w, ref)
        assert len(reference) == w.total
        kills: list[str] = []  # where each kill landed: complete sample lines

        def note(out: Path, code: int | None) -> None:
            if code is None:
                kills.append(str(sum(_done_lines(p) for p in w.sample_files(out))))

        for trial in range(TRIALS):
            out = tmp_path / f"t{trial}"
            note(out, _run_killed(w, w.start(out), out, _kill_point(rng, w.total)))
            for attempt in range(20):
                if w.complete(out):
                    break
                # killed before its record existed: start again; else resume
                args = [command, "--resume", str(out)] if w.record(out).exists() \
                    else [*w.start(out), "--force"]
                point = _kill_point(rng, w.total) if attempt < 3 and rng.random() < 0.5 \
                    else None  # half the first resumes are killed too
                note(out, _run_killed(w, args, out, point))
            else:
                raise AssertionError(f"trial {trial}: not complete after 20 resumes")
            samples = _samples(w, out)
            assert sorted(samples) == sorted(reference), f"trial {trial}"
            for key, s in samples.items():  # the same outputs as the uninterrupted run
                assert s["output"]["sha256"] == reference[key]["output"]["sha256"], key
                assert s["extracted"] == reference[key]["extracted"], key
            assert _quality(w, out) == _quality(w, ref)
            assert not list(out.rglob("*.tmp")), list(out.rglob("*"))
        print(f"{command}: kills landed at (complete samples of {w.total}):", kills)
        assert kills  # the trials did interrupt something


@pytest.mark.cost(10)
def test_baseline_record_killed_anywhere_leaves_no_corrupt_file(tmp_path: Path) -> None:
    """``abgate baseline record`` SIGKILLed at random moments (start-up, loading,
    measuring, writing): the directory holds either no ``baseline.json`` or a complete,
    valid one, never a partial file; recording again with --force completes and the
    baseline then checks (same tokens). On the fake engine (was the embedded llama.cpp:
    where the record is written is abgate's, not the engine's); its second request
    sleeps a real second, so that kills also land while it measures."""
    from abgate.records.documents import BaselineRecord
    from abgate.runner.documents import read_record
    from tests.conftest import abgate

    rng = random.Random(SEED)
    out = tmp_path / "B"
    args = [sys.executable, "-m", "abgate", "baseline", "record", "--engine", "fake",
            "--input-len", "16,32", "--output-len", "8", "--repeats", "1", "--warmup", "0",
            "--no-probes", "--engine-arg", "hang_at=2", "--engine-arg", "hang_s=1.0",
            "-o", str(out), "--force"]
    t0 = time.monotonic()
    full = subprocess.run(args, capture_output=True, text=True, timeout=HANG_S)
    assert full.returncode == 0, full.stderr
    duration = time.monotonic() - t0
    killed = 0
    for _ in range(max(TRIALS, 3)):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, duration))
        if proc.poll() is None:
            proc.kill()
            killed += 1
        proc.wait(timeout=HANG_S)
        assert not list(out.rglob("*.tmp")), list(out.rglob("*"))
        if (out / "baseline.json").exists():  # the old one, or a new one written whole
            assert read_record(out / "baseline.json", "baseline", model=BaselineRecord).cases
    assert killed
    r = subprocess.run(args, capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    # --tolerance 1: tokens only (the fake's simulated clock is not under test)
    check = abgate("baseline", "check", str(out), "--tolerance", "1")
    assert check.returncode == 0, check.stdout + check.stderr
