"""``abgate run`` end to end on the real engine, as a user would run it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import (
    abgate,
    error_lines,
    no_engine_env,
    read_lines,
    thread_flags,
)
from tests.support.fake import cli


@pytest.mark.engine
def test_acceptance_run_writes_8_samples(tmp_path: Path, gsm8k_path: Path) -> None:
    out = tmp_path / "R"
    r = abgate("run", "--suite", "gsm8k", "--data", str(gsm8k_path), "--limit", "4",
               "--seeds", "0,1", "--max-tokens", "64", *thread_flags(), "-o", str(out))
    assert r.returncode == 0, r.stderr
    samples = read_lines(out / "samples.jsonl")
    assert len(samples) == 8
    assert sorted({(s["item_id"], s["seed"]) for s in samples}) == sorted(
        (s["item_id"], s["seed"]) for s in samples)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and run["schema_version"] == 2
    assert run["spec"]["model"]["sha256"] and len(run["spec"]["item_ids"]) == 4
    assert run["spec"]["suite"]["data_sha256"] and run["spec"]["seeds"] == [0, 1]
    assert run["engine"]["name"] == "llamacpp" and run["engine"]["effective"]["n_ctx"]
    assert run["host"]["cores_logical"] >= 1 and run["abgate_version"]
    for s in samples:  # what the model answers is this CPU's; the record's shape is not
        assert s["output"]["token_ids"] and s["prompt"]["sha256"] and s["finish_reason"] in (
            "stop", "length")
        assert s["timing"]["ttft_s"] > 0 and s["extracted"] is not None
        assert s["correct"] == (s["extracted"]["value"] == s["reference"])
    by_item: dict[object, set[str]] = {}
    for s in samples:  # greedy: both seeds give the same tokens in one process
        by_item.setdefault(s["item_id"], set()).add(s["output"]["sha256"])
    assert all(len(shas) == 1 for shas in by_item.values()), by_item
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 8 and summary["quality"]["n"] == 8
    assert summary["speed"]["steady_decode_tps"]["n"] > 0
    # stderr is not a terminal here: plain progress lines there and in run.log
    progress = [x for x in r.stderr.splitlines() if x.startswith("abgate: run R: ")]
    assert progress[0] == "abgate: run R: 0/8 done, starting"
    assert progress[-1].startswith("abgate: run R: 8/8 (100%), ") and "tok/s" in progress[-1]
    assert "ETA" in progress[1] and progress[-1].removeprefix("abgate: ") in (
        out / "run.log").read_text()


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
