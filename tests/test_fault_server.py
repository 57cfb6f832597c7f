"""The ``openai`` engine against a fault-injecting server (tests/support/fault_server.py): every
fault becomes an error sample with its reason, never a wrong answer; retries happen only
before the first token; timeouts hold; a request cut off by a dying server is counted.
No model anywhere: the server streams canned tokens, so these tests are cheap."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.engines.openai import engine as openai_compat
from tests.conftest import HANG_S, REPO, read_lines, wait_until
from tests.support.fake import cli
from tests.support.fault_server import FaultServer

MAX_TOKENS = 6


def req(i: int | str, content: str, max_tokens: int = MAX_TOKENS) -> GenerationRequest:
    return GenerationRequest(id=str(i), params=SamplingParams(max_tokens=max_tokens, seed=1),
                             messages=({"role": "user", "content": content},))


def engine_for(fs: FaultServer, **opts: object) -> openai_compat.OpenAIEngine:
    # the timeout is only a hang guard here unless a test sets it shorter on purpose
    return openai_compat.load("", {}, {"endpoints": [fs.url], "request_timeout": 60.0,
                                       "retries": 2, **opts})


@pytest.fixture()
def fs() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


def test_a_normal_stream_is_a_normal_sample(fs: FaultServer) -> None:
    engine = engine_for(fs)
    try:
        (r,) = engine.generate([req(0, "plain question")])
    finally:
        engine.close()
    assert r.finish_reason == "length" and r.error is None
    assert r.text == "".join(f"t{i} " for i in range(MAX_TOKENS))
    assert r.output_tokens == MAX_TOKENS and r.output_token_ids == list(range(100, 106))
    assert r.engine_timings["attempts"] == 1.0 and r.engine_timings["usage_reported"] == 1.0


def test_a_dropped_chat_render_is_retried_as_a_generation_is() -> None:
    """A server that renders chats itself (/apply-template, as llama-server) drops the
    connection of a render without an answer (seen in CI: llama-server closing a
    kept-alive connection as /apply-template reused it, RemoteProtocolError): the render
    is tried again and the sample is normal, the retry counted; with no retries left it
    is an error sample naming the render."""
    for retries, drops in ((2, 1), (0, 1)):
        with FaultServer(owned_by="llamacpp", stream_prompt_ids=False) as server:
            engine = engine_for(server, retries=retries)
            try:
                assert engine.chat.route == "apply-template", engine.chat.describe()
                server.drop_renders = drops  # after the load's own render
                (r,) = engine.generate([req(0, "plain question")])
                counted = engine.stats[0].retries
            finally:
                engine.close()
            renders = [x for x in server.seen if x.path == "/apply-template"]
        if retries:
            assert r.error is None and r.output_tokens == MAX_TOKENS, r
            assert counted == 1 and len(renders) == 3  # the load's, the dropped, the retry
        else:
            assert r.finish_reason == "error", r
            assert "/apply-template: RemoteProtocolError" in str(r.error), r


def test_a_render_dropped_at_load_still_finds_the_server_route() -> None:
    """The load's own probe render dropped once (the same keep-alive race) is tried
    again: the engine renders on the server, not on the next route."""
    with FaultServer(owned_by="llamacpp", stream_prompt_ids=False, drop_renders=1) as server:
        engine = engine_for(server)
        try:
            assert engine.chat.route == "apply-template", engine.chat.describe()
        finally:
            engine.close()
        assert [x.path for x in server.seen].count("/apply-template") == 2


# fault -> (a part of the reason, attempts made, requests the server saw)
FAULTS = {
    "500": ("HTTP 500", 3, 3),  # transient, before any output: retried, bounded
    "400": ("HTTP 400", 1, 1),  # a client error is not retried
    "429": ("HTTP 429 (Retry-After 0 s)", 3, 3),
    "reset_first": ("RemoteProtocolError", 3, 3),  # dropped before any token: retried
    "reset_mid": ("RemoteProtocolError", 1, 1),  # dropped after output: never retried
    "malformed_first": ("unparsable SSE data", 1, 1),
    "malformed_mid": ("unparsable SSE data", 1, 1),
    "not_object": ("malformed SSE chunk (not a JSON object)", 1, 1),
    "bad_choices": ("'choices' is not a list", 1, 1),
    "bad_text": ("output text is not a string", 1, 1),
    "bad_ids": ("token IDs are not a list of integers", 1, 1),
    "cut_mid": ("without a finish reason", 1, 1),
    "cut_nodone": ("without [DONE]", 1, 1),
    "no_usage": ("no usage report", 1, 1),
    "usage_low": ("completion_tokens 4 < the 6 output chunks", 1, 1),
    "usage_high": ("completion_tokens 11 > max_tokens 6", 1, 1),
    "usage_str": ("completion_tokens = 'many'", 1, 1),
    "usage_prompt": ("prompt_tokens 7 != the 3 prompt token IDs", 1, 1),
}


def test_backoff_doubles_and_waits_at_least_a_capped_retry_after() -> None:
    assert [openai_compat._backoff(a, None) for a in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert openai_compat._backoff(0, 3.0) == 3.0 and openai_compat._backoff(2, 0.0) == 2.0
    assert openai_compat._backoff(0, 1e9) == openai_compat.RETRY_AFTER_CAP_S


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_an_error_sample_with_its_reason(fault: str, no_backoff: None) -> None:
    reason, attempts, seen = FAULTS[fault]
    with FaultServer(retry_after="0") as fs:
        engine = engine_for(fs)
        try:
            ok, (bad,) = engine.generate([req("ok", "plain")]), \
                engine.generate([req("f", f"question FAULT:{fault}")])
        finally:
            engine.close()
        got = [s.fault for s in fs.completions]
    assert ok[0].finish_reason == "length"  # the same server answers a normal request
    assert bad.finish_reason == "error" and bad.text == "" and bad.output_tokens == 0
    assert reason in (bad.error or ""), bad.error
    assert bad.error is not None and "\n" not in bad.error
    assert bad.engine_timings["attempts"] == attempts
    assert got == ["ok"] + [fault] * seen
    stats = engine.cleanup_evidence["endpoint_stats"][0]  # type: ignore[index]
    assert stats["requests"] == 2 and stats["errors"] == 1 and stats["cut_off"] == 0
    assert stats["retries"] == attempts - 1


@pytest.mark.parametrize("fault", ["503x1", "429x2"])
def test_retry_after_is_waited_then_the_answer_is_right(fault: str) -> None:
    with FaultServer(retry_after="1") as fs:
        engine = engine_for(fs)
        try:
            (r,) = engine.generate([req(0, f"q FAULT:{fault}")])
        finally:
            engine.close()
        times = [s.t for s in fs.completions]
    n = int(fault.split("x")[1])
    assert r.finish_reason == "length" and r.engine_timings["attempts"] == n + 1
    assert r.text.startswith("t0 t1 ")
    # a lower bound only (sleeping at least this long is the behaviour under test)
    assert all(b - a >= 1.0 for a, b in zip(times, times[1:], strict=False)), times


@pytest.mark.parametrize("fault", ["stall_headers", "stall_first", "stall_mid", "trickle"])
def test_timeouts_hold_and_are_not_retried(fault: str) -> None:
    """A stall before the headers, before the first token, mid-stream, or a server that
    keeps the connection alive with SSE comments: the request times out, once. (A stall
    lasts an hour, so a short timeout is as sure to be reached as a long one.)"""
    with FaultServer() as fs:
        engine = engine_for(fs, request_timeout=0.25)
        try:
            (r,) = engine.generate([req(0, f"q FAULT:{fault}")])
        finally:
            engine.close()
        got = [s.fault for s in fs.completions]
    assert r.finish_reason == "error" and r.text == ""
    assert "timed out after 0.25 s" in (r.error or "") or "ReadTimeout" in (r.error or ""), \
        r.error
    assert r.engine_timings["attempts"] == 1.0 and got == [fault]


def test_a_dying_server_fails_the_run_and_counts_the_cut_off_requests() -> None:
    with FaultServer(script=["ok", "ok", "die"]) as fs:
        engine = engine_for(fs, concurrency=1)
        recorded: list[str] = []
        try:
            with pytest.raises(openai_compat.ServerGone, match="stopped answering|refuses"):
                engine.generate([req(i, f"question {i}") for i in range(5)],
                                on_result=lambda r: recorded.append(r.request_id))
        finally:
            engine.close()
    assert recorded == ["0", "1"]  # the cut-off request is not a (wrong or empty) sample
    stats = engine.cleanup_evidence["endpoint_stats"][0]  # type: ignore[index]
    assert stats["requests"] == 3 and stats["errors"] == 1 and stats["cut_off"] == 1


def test_a_dying_server_at_concurrency_counts_every_request_in_flight() -> None:
    with FaultServer(script=["stall_mid", "stall_mid", "stall_mid", "die"]) as fs:
        engine = engine_for(fs, concurrency=4)
        try:
            with pytest.raises(openai_compat.ServerGone):
                engine.generate([req(i, f"question {i}") for i in range(8)])
        finally:
            engine.close()
    stats = engine.cleanup_evidence["endpoint_stats"][0]  # type: ignore[index]
    assert stats["requests"] == 4 and stats["cut_off"] == 4 and stats["errors"] == 4


# -- through the CLI ----------------------------------------------------------------------


def run_args(url: str, out: Path, *extra: str) -> list[str]:
    return ["run", "--engine", "openai", "--endpoint", url, "--suite", "synthetic", "--limit",
            "4", "--max-tokens", str(MAX_TOKENS), "--request-timeout", "60", "-o", str(out),
            *extra]


def test_cli_records_faults_as_error_samples(tmp_path: Path, no_backoff: None) -> None:
    with FaultServer(script=["ok", "500", "malformed_mid", "cut_nodone"], retry_after="0") as fs:
        r = cli(*run_args(fs.url, tmp_path / "R"))  # in this process
    assert r.returncode == 0, r.stderr
    samples = read_lines(tmp_path / "R" / "samples.jsonl")
    errors = sorted(str(s["error"]) for s in samples if s["finish_reason"] == "error")
    assert len(samples) == 4 and len(errors) == 3, samples
    assert any("HTTP 500" in e for e in errors) and any("unparsable" in e for e in errors)
    assert any("[DONE]" in e for e in errors)
    run = json.loads((tmp_path / "R" / "run.json").read_text())
    assert run["status"] == "complete"
    assert run["cleanup"]["endpoint_stats"][0]["errors"] == 3


def test_cli_killed_server_fails_the_run_and_counts_the_request(tmp_path: Path) -> None:
    """A real SIGKILL of a server process while a request streams."""
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, "-m", "tests.support.fault_server", "--port-file",
                               str(port_file), "--script", "ok,stall_mid"], cwd=REPO)
    out = tmp_path / "R"
    try:
        wait_until(lambda: port_file.exists() and port_file.read_text() != "", server, "a port")
        url = f"http://127.0.0.1:{port_file.read_text()}"
        proc = subprocess.Popen([sys.executable, "-m", "abgate", *run_args(url, out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samples = out / "samples.jsonl"
        wait_until(lambda: samples.exists() and samples.read_text().count("\n") >= 1, proc,
                   "a sample")
        os.kill(server.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    assert proc.returncode == 1, err
    assert "stopped answering" in err or "refuses connections" in err, err
    run = json.loads((out / "run.json").read_text())
    kept = read_lines(out / "samples.jsonl")
    assert run["status"] == "failed" and len(kept) == 1 and kept[0]["finish_reason"] != "error"
    stats = run["cleanup"]["endpoint_stats"][0]
    assert stats["errors"] >= 1 and stats["cut_off"] >= 1, stats


def test_a_server_that_cannot_score_after_all_is_refused_before_generating(
        tmp_path: Path) -> None:
    """A "vLLM" started with --max-logprobs 5 declares top-k scoring but refuses k = 20:
    the A/B says so in one line at load, before any sample; --no-agreement runs it; the
    same server with the default cap is scored through prompt_logprobs (A/A: KL 0)."""
    def experiment(url: str) -> Path:
        exp = tmp_path / "exp.toml"
        exp.write_text(f"""name = "scoring-preflight"
baseline = "a"
[shared]
engine = "openai"
suite = "synthetic"
limit = 3
max_tokens = 4
engine_options = {{ endpoints = ["{url}"], request_timeout = 60.0 }}
[schedule]
warmup = 0
[evidence]
probes = false
[arms.a]
[arms.b]
""")
        return exp

    with FaultServer(max_logprobs=5) as capped:
        r = cli("ab", str(experiment(capped.url)), "-o", str(tmp_path / "AB"))  # in-process
        assert r.returncode == 2  # the server's setup is the user's to fix (1 is REJECT)
        line = r.stderr.strip().splitlines()[-1]
        assert "arm 'a'" in line and "test score at load failed" in line, r.stderr
        assert "greater than max allowed: 5" in line and "--max-logprobs" in line
        # refused before any sample was generated: the one request was the test score
        assert [s.fault for s in capped.completions] == ["score"]
        assert not (tmp_path / "AB" / "arms" / "a" / "samples.jsonl").exists() or not \
            read_lines(tmp_path / "AB" / "arms" / "a" / "samples.jsonl")
        r = cli("ab", str(experiment(capped.url)), "-o", str(tmp_path / "AB2"),
                "--no-agreement")
        assert r.returncode in (0, 3), r.stderr
    with FaultServer() as fs:
        r = cli("ab", str(experiment(fs.url)), "-o", str(tmp_path / "AB3"))
        assert r.returncode in (0, 3), r.stderr
        rows = read_lines(tmp_path / "AB3" / "arms" / "b" / "agreement.jsonl")
        assert len(rows) == 3 and all(row["method"] == "top_k" and row["k"] == 20
                                      and set(row["kl"]) == {0.0} for row in rows)
