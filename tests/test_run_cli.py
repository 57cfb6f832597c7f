"""``abgate run`` as a user would run it: bad input refused before anything loads. The
acceptance run on the real engine (4 GSM8K items x 2 seeds) is the README's first command,
run and checked by tests/test_readme_examples.py (``_check_the_acceptance_run``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import (
    abgate,
    error_lines,
    no_engine_env,
)
from tests.support.fake import cli


def test_bad_engine_arg_fails_fast(tmp_path: Path) -> None:
    # "fast" is a behaviour, not a wall-clock bound: refused before llama.cpp is imported
    env, imported = no_engine_env(tmp_path)
    r = abgate("run", "--suite", "synthetic", "--limit", "2", "--engine-arg", "flash_atn=true",
               "-o", str(tmp_path / "R"), env=env)
    assert r.returncode == 2
    assert "flash_attn" in r.stderr and "flash_atn" in r.stderr
    assert len(error_lines(r.stderr)) == 1
    assert not imported.exists()
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite", "gsm9k"], "unknown suite 'gsm9k'"),
        (["--suite", "synthetic", "--model", "/nope/m.gguf"], "model file not found"),
        (["--suite", "synthetic", "--engine-arg", "n_ctx=abc"], "'n_ctx' expects int"),
        (["--suite", "synthetic", "--seeds", "0,a"], "'a' is not an integer"),
        (["--suite", "gsm8k", "--data", "/nope/data.jsonl"], "data file not found"),
        (["--suite", "synthetic", "--engine", "vlm"], "unknown engine 'vlm'"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    # in this process (test_bad_engine_arg_fails_fast is the same path through a subprocess)
    r = cli("run", *args, "--limit", "1", "-o", str(tmp_path / "R"))
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and len(error_lines(r.stderr)) == 1
    assert not (tmp_path / "R").exists()


def test_malformed_dataset_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "d.jsonl"
    bad.write_text('{"question": "a", "answer": "#### 1"}\n{broken\n')
    r = cli("run", "--data", str(bad), "-o", str(tmp_path / "R"))
    assert r.returncode == 2 and f"{bad}:2" in r.stderr


def test_version() -> None:
    r = abgate("--version")
    assert r.returncode == 0 and r.stdout.startswith("abgate ")
