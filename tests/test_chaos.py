"""Kill anywhere: ``abgate run`` SIGKILLed at random points (mid-request, mid-write of a
sample, while finalising), then resumed (and the resume itself killed at random), ends
with every (item, seed) exactly once, no corrupt file, and the same outputs and quality
summary as an uninterrupted run. The engine is the ``openai`` client against the
fault server's canned tokens, so a trial costs processes, not a model.

ABGATE_CHAOS_TRIALS=N runs N trials (default 3, for CI) from seed ABGATE_CHAOS_SEED."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import HANG_S, read_lines
from tests.fault_server import FaultServer

TRIALS = int(os.environ.get("ABGATE_CHAOS_TRIALS", "3"))
SEED = int(os.environ.get("ABGATE_CHAOS_SEED", "13"))


def _args(url: str, out: Path) -> list[str]:
    return ["run", "--engine", "openai", "--endpoint", url, "--suite", "synthetic",
            "--limit", "8", "--seeds", "0,1", "--max-tokens", "8", "--request-timeout", "60",
            "-o", str(out)]


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "abgate", *args]


def _run_killed(args: list[str], out: Path, kill: tuple[int, float] | None) -> int | None:
    """Run the CLI; with ``kill = (k, s)``, SIGKILL it ``s`` seconds after its
    samples.jsonl holds ``k`` bytes-complete lines (k = -1: ``s`` seconds after start),
    if it is still running then. The exit code, or None when it was killed."""
    proc = subprocess.Popen(_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    if kill is not None:
        k, jitter = kill
        path = out / "samples.jsonl"
        deadline = time.monotonic() + HANG_S
        while k >= 0 and proc.poll() is None and time.monotonic() < deadline and (
                not path.exists() or path.read_bytes().count(b"\n") < k):
            time.sleep(0.005)
        time.sleep(jitter)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
            return None
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode in (0, 1), err  # finished, or failed cleanly (never a traceback)
    assert "Traceback" not in err, err
    return proc.returncode


def _kill_point(rng: random.Random) -> tuple[int, float]:
    """Mostly while samples are being written (after k of them, plus up to 30 ms: a
    sample's request, its write, the summary); sometimes during start-up or loading."""
    if rng.random() < 0.2:
        return -1, rng.uniform(0.2, 4.0)
    return rng.randrange(0, 16), rng.uniform(0.0, 0.03)


def _quality(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "summary.json").read_text())["quality"])


def test_kill_anywhere_then_resume(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    with FaultServer(vary=True) as fs:
        ref = tmp_path / "ref"
        t_ref = _run_killed(_args(fs.url, ref), ref, None)
        assert t_ref == 0
        reference = {s["key"]: s for s in read_lines(ref / "samples.jsonl")}
        assert len(reference) == 16
        kills: list[str] = []  # where each kill landed: samples done, a torn line

        def note(out: Path, code: int | None) -> None:
            if code is None:
                path = out / "samples.jsonl"
                raw = path.read_bytes() if path.exists() else b""
                kills.append(f"{len(read_lines_safe(out)) if raw else 'no samples'}"
                             + (" +torn" if raw and not raw.endswith(b"\n") else ""))

        for trial in range(TRIALS):
            out = tmp_path / f"t{trial}"
            # first run: killed somewhere between start-up and the end
            note(out, _run_killed(_args(fs.url, out), out, _kill_point(rng)))
            for attempt in range(20):
                if (out / "samples.jsonl").exists() and len(read_lines_safe(out)) == 16 \
                        and json.loads((out / "run.json").read_text())["status"] == "complete":
                    break
                if (out / "run.json").exists():
                    args = ["run", "--resume", str(out)]
                else:  # killed before its record existed: start again
                    args = [*_args(fs.url, out), "--force"]
                # half the first resumes are killed too
                point = _kill_point(rng) if attempt < 3 and rng.random() < 0.5 else None
                note(out, _run_killed(args, out, point))
            else:
                raise AssertionError(f"trial {trial}: not complete after 20 resumes")
            samples = read_lines(out / "samples.jsonl")  # every line parses
            keys = [s["key"] for s in samples]
            assert sorted(keys) == sorted(reference), f"trial {trial}: {sorted(keys)}"
            for s in samples:  # the same outputs as the uninterrupted run
                assert s["output"]["sha256"] == reference[s["key"]]["output"]["sha256"]
                assert s["extracted"] == reference[s["key"]]["extracted"]
            assert _quality(out) == _quality(ref)
            assert not list(out.glob("*.tmp")), list(out.iterdir())
        print("kills landed at (complete samples of 16):", kills)
        assert kills  # the trials did interrupt something


def read_lines_safe(out: Path) -> list[dict[str, Any]]:
    """Complete sample lines (a torn last line, which --resume repairs, is not one)."""
    lines = (out / "samples.jsonl").read_text().split("\n")
    done = []
    for line in lines[:-1]:
        try:
            done.append(json.loads(line))
        except ValueError:
            return []
    return done
