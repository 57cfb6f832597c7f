"""Bad input refused before work (issue 26, item 6): one line, exit 2, no directory
written, no engine loaded (``engine_refused``: importing llama_cpp would be noted). The
commands run in this process (``tests.support.fake.cli``; test_run_cli.py has the same
refusal through a subprocess). The model checks use abgate's own GGUF reader on copies
of the real embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import engine_refused, error_lines
from tests.support.fake import cli

RUN = ["run", "--suite", "synthetic", "--limit", "1", "--max-tokens", "2"]


def _refused(tmp_path: Path, *args: str, needle: str) -> str:
    out = tmp_path / "R"
    with engine_refused() as imported:
        r = cli(*args, "-o", str(out))
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0], lines[0]
    assert not out.exists() and not imported
    return lines[0]


def test_truncated_gguf_is_refused_before_load(tmp_path: Path, model_path: str) -> None:
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(Path(model_path).read_bytes()[:200_000])  # inside the vocabulary
    _refused(tmp_path, *RUN, "--model", str(bad), needle="truncated GGUF file")


def test_gguf_with_a_garbage_header_is_refused(tmp_path: Path, model_path: str) -> None:
    data = bytearray(Path(model_path).read_bytes()[:4096])
    data[4:8] = (7).to_bytes(4, "little")  # GGUF version 7
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(bytes(data))
    _refused(tmp_path, *RUN, "--model", str(bad), needle="GGUF version 7 is not supported")


def test_missing_lora_path_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, *RUN, "--engine-arg", f"lora_path={tmp_path / 'none.gguf'}",
             needle="lora_path=")


def test_lora_path_that_is_a_model_is_refused(tmp_path: Path, model_path: str) -> None:
    line = _refused(tmp_path, *RUN, "--engine-arg", f"lora_path={model_path}",
                    needle="not a LoRA adapter")
    assert "'model'" in line


def test_launch_program_that_does_not_exist_writes_nothing(tmp_path: Path) -> None:
    _refused(tmp_path, "run", "--engine", "openai", "--launch",
             "no-such-server-xyz --port {port}", "--suite", "synthetic", "--limit", "1",
             needle="program 'no-such-server-xyz' not found")


@pytest.mark.parametrize("seeds", ["-1", "0,-5", "4294967295"])
def test_seeds_llama_cpp_would_randomise_are_refused(tmp_path: Path, seeds: str) -> None:
    _refused(tmp_path, *RUN, f"--seeds={seeds}", needle="out of range")


def test_over_long_prompt_is_refused_before_tokenizing(tmp_path: Path) -> None:
    data = tmp_path / "huge.jsonl"
    data.write_text(json.dumps({"question": "x" * 1_100_000, "answer": "#### 1"}) + "\n")
    _refused(tmp_path, "run", "--suite", "gsm8k", "--data", str(data), needle="characters")
