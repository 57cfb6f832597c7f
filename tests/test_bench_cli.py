"""``abgate bench`` end to end, as a user would run it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import abgate, engine_refused, error_lines, read_lines, thread_flags
from tests.support.fake import cli

# One thread (unless ABGATE_TEST_THREADS says otherwise) keeps these small runs quick on a
# shared machine (llama.cpp's worker threads spin-wait, which a busy 2-core machine
# punishes).
SMALL = ("--input-len", "64", "--output-len", "16", "--repeats", "2", "--peak-bw", "10",
         "--engine-arg", "n_ctx=256", *thread_flags(default=1))


@pytest.mark.engine
def test_bench_records_and_prints_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "B"
    r = abgate("bench", *SMALL, "-o", str(out))
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "bench" and run["schema_version"] == 2
    assert run["status"] == "complete" and run["engine"]["name"] == "llamacpp"
    assert run["spec"]["model"]["sha256"] and run["host"]["cores_logical"] >= 1
    assert "git" in run and run["config"]["input_lens"] == [64]
    samples = read_lines(out / "samples.jsonl")
    assert [s["warmup"] for s in samples] == [True, False, False]
    summary = json.loads((out / "summary.json").read_text())
    case = summary["cases"][0]
    assert summary["kind"] == "bench" and summary["status"] == "complete"
    assert case["n"] == 2 and case["outputs_identical"] and len(case["output_token_ids"]) == 16
    assert case["warmup_identical"] and "the warm-up too" in r.stdout
    roof = case["roofline"]
    assert roof["peak_gbps"] == 10 and roof["achieved_gbps"] > 0
    assert summary["peak_bandwidth"]["source"].startswith("declared")
    assert summary["resources"]["peak_rss_bytes"] > 0 and summary["probes"] is None
    for text in ("prefill tok/s", "TTFT ms", "steady decode tok/s", "TPOT ms", "llamacpp",
                 "abgate/engine", case["prompt_sha256"], case["output_sha256"], "roofline",
                 "peak RSS"):
        assert text in r.stdout, text
    assert "abgate: bench B: 3/3 (100%), " in r.stderr  # progress on a non-terminal

    # a second process at the same thread count on this host: the same greedy output
    again = abgate("bench", *SMALL, "-o", str(tmp_path / "B2"))
    assert again.returncode == 0, again.stderr
    case2 = json.loads((tmp_path / "B2" / "summary.json").read_text())["cases"][0]
    assert case2["prompt_sha256"] == case["prompt_sha256"]
    assert case2["output_sha256"] == case["output_sha256"]

    # refused before any engine is loaded: the CLI in this process, not an interpreter
    with engine_refused() as attempts:
        refused = cli("bench", *SMALL, "-o", str(out))
    assert refused.returncode == 2 and "not empty" in refused.stderr
    assert attempts == []


def test_one_token_past_the_context_is_a_usage_error(tmp_path: Path) -> None:
    """On the fake engine in-process (was an engine-tier test on llama.cpp)."""
    out = tmp_path / "B"
    r = cli("bench", "--engine", "fake", "--input-len", "241", "--output-len", "16",
            "--engine-arg", "n_ctx=256", "-o", str(out))
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "n_ctx=256" in lines[0] and "240" in lines[0]
    assert not out.exists()


def test_wrong_prompt_sha_refuses_to_run(tmp_path: Path) -> None:
    """On the fake engine in-process (was an engine-tier test on llama.cpp)."""
    r = cli("bench", "--engine", "fake", "--input-len", "32", "--output-len", "4",
            "--engine-arg", "n_ctx=256", "--expect-prompt-sha", "ab" * 32,
            "-o", str(tmp_path / "B"))
    assert r.returncode == 2 and "refusing to run" in r.stderr
    assert len(error_lines(r.stderr)) == 1 and not (tmp_path / "B").exists()


def test_bad_options_fail_fast(tmp_path: Path) -> None:
    # "fast" is a behaviour, not a wall-clock bound: each is refused before llama.cpp is
    # even imported (engine_refused notes an import or a load; the CLI runs in this
    # process, the subprocess twin of this check is test_run_cli's)
    for args in (("--input-len", "12k"), ("--output-len", "0"), ("--repeats", "0"),
                 ("--prompt-file", str(tmp_path / "missing.json")),
                 ("--engine-arg", "n_ctxx=5"), ("--probes", "--probe-depth", "2")):
        with engine_refused() as imported:
            r = cli("bench", *args, "-o", str(tmp_path / "B"))
        assert r.returncode == 2, (args, r.stderr)
        assert len(error_lines(r.stderr)) == 1, r.stderr
        assert not imported, args
    assert not (tmp_path / "B").exists()
