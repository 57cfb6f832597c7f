"""Engines registered by entry point: an out-of-tree engine distribution (a real
``*.dist-info/entry_points.txt`` on ``sys.path``) runs end to end through
``abgate run --engine myengine`` with no edit of abgate, and a bad plug-in (a name
clash, an entry point that does not import, a class that is not an Engine) is one line
naming its distribution and entry point, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.plugin import make_dist

SRC = Path(__file__).resolve().parents[2] / "src"

def abgate(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{root}", "ABGATE_LEDGER": "off"}
    return subprocess.run([sys.executable, "-m", "abgate", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def test_out_of_tree_engine_runs_end_to_end(tmp_path: Path) -> None:
    root = make_dist(tmp_path / "site", "myengine", {"myengine": "myengine_pkg:MyEngine"})
    listed = abgate(root, "engines", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "myengine_pkg:MyEngine  (myengine 0.1)" in listed.stdout
    assert "llamacpp" in listed.stdout and "abgate (built-in)" in listed.stdout
    out = tmp_path / "run"
    done = abgate(root, "run", "--engine", "myengine", "--suite", "synthetic", "--limit",
                  "3", "--max-tokens", "16", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "complete"
    assert "myengine" in json.dumps(record["config"])
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["error"] is None for x in lines)


@pytest.mark.parametrize(("entries", "engine", "says"), [
    ({"llamacpp": "bad_pkg:MyEngine"}, "llamacpp",
     "entry point llamacpp = bad_pkg:MyEngine of bad 0.1 clashes with the engine "
     "'llamacpp' of abgate (built-in)"),
    ({"broken": "bad_pkg.nowhere:MyEngine"}, "broken",
     "entry point broken = bad_pkg.nowhere:MyEngine of bad 0.1 does not import "
     "(ModuleNotFoundError"),
    ({"notengine": "bad_pkg:NotAnEngine"}, "notengine",
     "entry point notengine = bad_pkg:NotAnEngine of bad 0.1 is not an "
     "abgate.engines.base.Engine subclass"),
])
def test_bad_plugin_is_one_line_exit_2(tmp_path: Path, entries: dict[str, str],
                                       engine: str, says: str) -> None:
    root = make_dist(tmp_path / "site", "bad", entries)
    out = tmp_path / "run"
    done = abgate(root, "run", "--engine", engine, "--suite", "synthetic", "--limit", "1",
                  "-o", str(out), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip()
    assert says in message and len(message.splitlines()) == 1, message
    assert not out.exists()  # refused before anything was written
