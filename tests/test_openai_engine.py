"""The ``openai`` engine: the streaming client against a scripted server (fast, exact),
then for real against a launched llama.cpp server (``python -m llama_cpp.server``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.engines.openai import engine as openai_compat
from abgate.engines.shared import server as server
from abgate.errors import AbgateError, UsageError
from tests.conftest import HANG_S, abgate, read_lines, thread_flags, wait_until

# A scripted OpenAI-compatible server, stdlib only (written to a file and launched).
FAKE_SERVER = r'''
import argparse, json, os, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--owned-by", default="vllm")
ap.add_argument("--record")
ap.add_argument("--fail-first", type=int, default=0)
ap.add_argument("--delay", type=float, default=0.0)
ap.add_argument("--no-usage", action="store_true")
ap.add_argument("--no-finish", action="store_true")
ap.add_argument("--stubborn", action="store_true")
ap.add_argument("--spawn", action="store_true")
ap.add_argument("--never-ready", action="store_true")
ap.add_argument("--exit-early", action="store_true")
a, extra = ap.parse_known_args()
print("fake server starting; extra flags:", extra, flush=True)
if a.exit_early:
    print("fatal: cannot load model", flush=True)
    sys.exit(3)
if a.stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if a.spawn:  # a child, and a child that escapes the process group; both carry the marker
    code = "import signal, sys, time\n"
    if a.stubborn:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", code, *extra])
    subprocess.Popen([sys.executable, "-c", code, *extra], start_new_session=True)
if a.never_ready:
    time.sleep(600)
state = {"flaky": 0}

class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _json(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self._json(200, {"data": [{"id": "fake-model", "owned_by": a.owned_by}]})
        elif self.path == "/version":
            self._json(200, {"version": "fake-1.0"})
        else:
            self._json(404, {"detail": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if a.record:
            with open(a.record, "a") as f:
                f.write(json.dumps({"body": body, "auth": self.headers.get("Authorization"),
                                    "port": a.port}) + "\n")
        text = json.dumps(body.get("messages") or body.get("prompt"))
        if "BAD" in text:
            return self._json(400, {"error": {"message": "bad prompt"}})
        state["flaky"] += "FLAKY" in text
        if "FLAKY" in text and state["flaky"] <= a.fail_first:
            return self._json(503, {"error": {"message": "warming up"}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chat = self.path.endswith("chat/completions")
        n = body["max_tokens"] // 2
        def send(doc):
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.flush()
        send({"prompt_token_ids": [1, 2, 3],
              "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        for i in range(n):
            time.sleep(a.delay)
            piece = f"w{i} x{i} "
            c = {"index": 0, "token_ids": [100 + 2 * i, 101 + 2 * i], "finish_reason": None}
            c.update({"delta": {"content": piece}} if chat else {"text": piece})
            send({"choices": [c]})
        if not a.no_finish:
            send({"choices": [{"index": 0, "delta": {}, "text": "", "finish_reason": "length"}]})
            if not a.no_usage:
                send({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2 * n}})
        self.wfile.write(b"data: [DONE]\n\n")

print("fake server ready", flush=True)
ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()
'''

MSGS = ({"role": "user", "content": "What is 7 + 5?"},)


@pytest.fixture(scope="session")
def fake_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fake") / "fake_server.py"
    path.write_text(FAKE_SERVER)
    return path


def fake_cmd(script: Path, *flags: str) -> str:
    return " ".join([sys.executable, str(script), "--port {port}", *flags])


def req(i: int | str, content: str = "What is 7 + 5?", max_tokens: int = 8) -> GenerationRequest:
    return GenerationRequest(id=str(i), params=SamplingParams(max_tokens=max_tokens, seed=3),
                             messages=({"role": "user", "content": content},))


@pytest.fixture()
def stays_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed request abgate waits up to 1 s for a launched server to exit (how a
    crash shows); for a server that stays up the answer is "alive" either way, so the
    wait is cut to 0.1 s (a server that does die: test_endpoint_dying_mid_run_fails_the_run)."""
    died_within = server.ManagedServer.died_within
    monkeypatch.setattr(server.ManagedServer, "died_within",
                        lambda self, timeout: died_within(self, min(timeout, 0.1)))


@pytest.fixture()
def fake_engine(fake_script: Path, tmp_path: Path) -> Iterator[openai_compat.OpenAIEngine]:
    record = tmp_path / "bodies.jsonl"
    opts = {"launch": fake_cmd(fake_script, "--record", str(record), "--fail-first 2"),
            "concurrency": 2, "ready_timeout": 30.0}
    engine = openai_compat.load("", {}, opts, tmp_path)
    engine.record = record  # type: ignore[attr-defined]
    yield engine
    engine.close()


def test_stream_usage_token_ids_and_explicit_sampling(
        fake_engine: openai_compat.OpenAIEngine) -> None:
    seen: list[str] = []
    results = fake_engine.generate([req(0), req(1, max_tokens=6)],
                                   on_result=lambda r: seen.append(r.request_id))
    assert sorted(seen) == ["0", "1"] and [r.request_id for r in results] == ["0", "1"]
    r = results[0]
    assert r.finish_reason == "length" and r.text.startswith("w0 x0 w1 x1")
    # usage (8 tokens) wins over the number of chunks (4): a chunk may carry 2 tokens
    assert r.output_tokens == 8 and len(r.token_times or []) == 4
    assert r.output_token_ids == list(range(100, 108)) and r.prompt_token_ids == [1, 2, 3]
    assert r.prompt_tokens == 3 and r.engine_timings["usage_reported"] == 1.0
    assert r.t_first_token is not None and r.t_submit < r.t_first_token <= (r.t_last_token or 0)
    info = fake_engine.describe()
    assert info.name == "openai" and info.model == "fake-model" and info.version == "fake-1.0"
    eff = info.effective_config
    assert eff["server_kind"] == "vllm" and eff["probe"]["token_ids"] is True
    assert info.capabilities.token_ids and eff["token_counts"] == "server usage"
    bodies = [json.loads(x)["body"] for x in fake_engine.record.read_text().splitlines()]  # type: ignore[attr-defined]
    body = bodies[-1]
    for key, value in {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
                       "repeat_penalty": 1.0, "repetition_penalty": 1.0, "seed": 3,
                       "presence_penalty": 0.0, "frequency_penalty": 0.0, "stream": True,
                       "return_token_ids": True, "model": "fake-model"}.items():
        assert body[key] == value, key
    assert body["stream_options"] == {"include_usage": True}
    # every request to vLLM has its own prefix-cache salt: no TTFT is a cache hit
    salts = [b["cache_salt"] for b in bodies if "cache_salt" in b]
    assert len(salts) == len(bodies) and len(set(salts)) == len(salts)
    assert eff["prefix_cache"] == "isolated per request (cache_salt)"


def test_retry_before_first_token_is_bounded_and_recorded(
        fake_engine: openai_compat.OpenAIEngine, no_backoff: None, stays_up: None) -> None:
    ok, bad = fake_engine.generate([req("f", "FLAKY question"), req("b", "BAD question")])
    assert ok.finish_reason == "length" and ok.engine_timings["attempts"] == 3.0
    assert fake_engine.stats[0].retries == 2  # two 503s before any token, then success
    assert bad.finish_reason == "error" and "HTTP 400" in (bad.error or "")
    assert bad.engine_timings["attempts"] == 1.0  # a 4xx is not retried
    fake_engine.close()
    ev = fake_engine.cleanup_evidence
    assert ev is not None and ev["verified"] and ev["server"]["port_free"]
    assert ev["endpoint_stats"][0]["requests"] == 2 and ev["endpoint_stats"][0]["errors"] == 1


def test_retries_exhausted_is_an_error_sample(fake_script: Path, tmp_path: Path,
                                              no_backoff: None, stays_up: None) -> None:
    engine = openai_compat.load("", {}, {"launch": fake_cmd(fake_script, "--fail-first 99"),
                                         "ready_timeout": 30.0}, tmp_path)
    try:
        engine.opts = dataclasses.replace(engine.opts, retries=1)
        (r,) = engine.generate([req("x", "FLAKY")])
    finally:
        engine.close()
    assert r.finish_reason == "error" and r.error and r.error.count("HTTP 503") == 2
    assert r.engine_timings["attempts"] == 2.0 and engine.stats[0].retries == 1


def test_no_usage_and_no_finish_are_said_so(fake_script: Path, tmp_path: Path) -> None:
    engine = openai_compat.load("", {}, {"launch": fake_cmd(fake_script, "--no-usage",
                                                            "--owned-by", "me")}, tmp_path)
    try:
        (r,) = engine.generate([req(0)])
        eff = engine.describe().effective_config
    finally:
        engine.close()
    assert r.output_tokens == 4 and r.engine_timings["usage_reported"] == 0.0
    assert eff["token_counts"].startswith("streamed chunks") and eff["probe"]["usage"] is False
    with pytest.raises(AbgateError, match="without a finish reason"):
        openai_compat.load("", {}, {"launch": fake_cmd(fake_script, "--no-finish")}, tmp_path)


def test_replicas_share_the_load(fake_script: Path, tmp_path: Path) -> None:
    record = tmp_path / "bodies.jsonl"
    servers = [server.launch(fake_cmd(fake_script, "--delay 0.05", "--record", str(record)),
                             model="", args={}, log_dir=tmp_path, ready_timeout=30)
               for _ in range(2)]
    try:
        engine = openai_compat.load("", {}, {"endpoints": [s.base_url for s in servers],
                                             "concurrency": 4})
        results = engine.generate([req(i) for i in range(8)])
        engine.close()
    finally:
        for s in servers:
            s.stop()
    assert all(r.finish_reason == "length" for r in results)
    stats = engine.cleanup_evidence["endpoint_stats"]  # type: ignore[index]
    assert [s["requests"] for s in stats] == [4, 4]
    assert engine.cleanup_evidence["launched"] is False  # type: ignore[index]
    assert {r.engine_timings["endpoint"] for r in results} == {0.0, 1.0}


def test_endpoint_dying_mid_run_fails_the_run(fake_script: Path, tmp_path: Path) -> None:
    s = server.launch(fake_cmd(fake_script, "--delay 0.2"), model="", args={},
                      log_dir=tmp_path, ready_timeout=30)
    engine = openai_compat.load("", {}, {"endpoints": [s.base_url]})
    recorded: list[str] = []
    try:
        t = time.monotonic()
        threading.Timer(0.5, lambda: os.killpg(s.proc.pid, signal.SIGKILL)).start()
        with pytest.raises(openai_compat.ServerGone, match="stopped answering|refuses"):
            engine.generate([req(i, max_tokens=20) for i in range(3)],
                            on_result=lambda r: recorded.append(r.request_id))
        assert time.monotonic() - t < 20
    finally:
        engine.close()
        s.stop()
    assert recorded == []  # the in-flight request is not recorded as an error sample


def test_api_key_from_env_is_sent_never_recorded(fake_script: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABGATE_TEST_KEY", "sk-secret-123")
    record = tmp_path / "bodies.jsonl"
    engine = openai_compat.load(
        "", {}, {"launch": fake_cmd(fake_script, "--record", str(record), "--api-key {api_key}"),
                 "api_key_env": "ABGATE_TEST_KEY"}, tmp_path)
    engine.generate([req(0)])
    info = json.dumps(engine.describe().to_dict())
    engine.close()
    assert json.loads(record.read_text().splitlines()[-1])["auth"] == "Bearer sk-secret-123"
    assert "sk-secret" not in info and "sk-secret" not in json.dumps(engine.cleanup_evidence)
    log = (tmp_path / "server-fake_server.log").read_text()
    assert "<redacted>" in info and "<redacted>" in log.splitlines()[0]
    assert "sk-secret" not in log  # the server printed its flags; the log is scrubbed


@pytest.mark.parametrize(("opts", "args", "message"), [
    ({}, {}, "needs --endpoint URL"),
    ({"endpoints": ["http://127.0.0.1:1"], "launch": "x {port}"}, {}, "not both"),
    ({"endpoints": ["127.0.0.1:8000"]}, {}, "expected http://"),
    ({"endpoints": ["http://127.0.0.1:1"], "api": "chats"}, {}, "expected chat or completions"),
    ({"endpoints": ["http://127.0.0.1:1"], "concurrency": 0}, {}, "--concurrency"),
    ({"endpoints": ["http://127.0.0.1:1"], "concurency": 2}, {}, "unknown option"),
    ({"endpoints": ["http://127.0.0.1:1"], "concurrency": "2"}, {}, "expects int"),
    ({"endpoints": ["http://127.0.0.1:1"]}, {"n_ctx": 4096}, "launched server's flags"),
    ({"launch": "python -m x --port 8000"}, {}, "must contain {port}"),
    ({"launch": "python -m llama_cpp.server --port {port}", "concurrency": 2}, {},
     "--interrupt_requests false"),
    # a program that does not exist is refused with the options, before anything is
    # written (issue 26)
    ({"launch": "x --model {model} --port {port}"}, {}, "program 'x' not found"),
    ({"endpoints": ["http://127.0.0.1:1"], "api_key_env": "ABGATE_NOPE_X"}, {}, "not set"),
])
def test_bad_options_are_usage_errors(opts: dict[str, Any], args: dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("{", r"\{").replace("}", r"\}")):
        openai_compat.load("", args, opts)


def test_server_flag_names_are_checked() -> None:
    spec = openai_compat.ARG_SPECS["tensor-parallel-size"]
    assert spec.resolve(2) == 2 and spec.resolve([1, 2]) == [1, 2]
    with pytest.raises(UsageError, match="not a server flag"):
        openai_compat.ARG_SPECS["bad key;rm"]
    assert openai_compat.resolve_model(None) == ""
    assert openai_compat.resolve_model("Qwen/Qwen2.5-7B") == "Qwen/Qwen2.5-7B"


# -- for real: llama.cpp's Python server ------------------------------------------------


def _llama_server_available() -> bool:
    try:
        import fastapi  # noqa: F401
        import llama_cpp.server.app  # noqa: F401
        import sse_starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


needs_server = pytest.mark.skipif(not _llama_server_available(),
                                  reason="needs llama-cpp-python[server] (pip install "
                                         "'abgate[server]')")
LAUNCH = (f"{sys.executable} -m llama_cpp.server --model {{model}} --host {{host}} "
          "--port {port} --chat_format chat_template.default --logits_all false "
          "--use_mlock false --verbose false --interrupt_requests false")
# the same engine args drive the embedded engine and the launched server (as its flags,
# --n_threads N --n_threads_batch N): the same thread count on the same host, so the same
# greedy tokens. One thread each (unless ABGATE_TEST_THREADS says otherwise) keeps the
# comparison quick on a busy 2-core machine.
COMMON_ARGS = ["--engine-arg", "n_ctx=4096", *thread_flags(default=1)]


def served(model_path: str, *extra: str) -> list[str]:
    return ["--engine", "openai", "--model", model_path, "--launch", LAUNCH, *COMMON_ARGS,
            *extra]


def _same_greedy_answers_as_embedded_with_concurrency(
        tmp_path: Path, gsm8k_path: Path, model_path: str) -> None:
    base = ["run", "--suite", "gsm8k", "--data", str(gsm8k_path), "--limit", "3",
            "--max-tokens", "24"]
    r = abgate(*base, *COMMON_ARGS, "-o", str(tmp_path / "E"))
    assert r.returncode == 0, r.stderr
    r = abgate(*base, *served(model_path, "--concurrency", "2"), "-o", str(tmp_path / "S"))
    assert r.returncode == 0, r.stderr
    # recorded here by the embedded engine, checked here against the server: the texts
    # are this host's, never constants
    emb = {s["key"]: s for s in read_lines(tmp_path / "E" / "samples.jsonl")}
    srv_samples = {s["key"]: s for s in read_lines(tmp_path / "S" / "samples.jsonl")}
    assert emb.keys() == srv_samples.keys()
    for key, e in emb.items():
        s = srv_samples[key]
        assert s["output"]["text"] == e["output"]["text"], key
        assert s["extracted"] == e["extracted"] and s["finish_reason"] == e["finish_reason"]
        assert s["output"]["tokens"] == e["output"]["tokens"]  # one chunk per token here
        assert s["timing"]["ttft_s"] > 0
        assert (s["timing"]["steady_decode_tps"] or 0) > 0 or s["output"]["tokens"] < 2
        assert s["output"]["token_ids"] is None  # llama_cpp.server cannot return them
    run = json.loads((tmp_path / "S" / "run.json").read_text())
    assert run["status"] == "complete"
    eff = run["engine"]["effective"]
    assert eff["server_kind"] == "llama-cpp-python" and eff["concurrency"] == 2
    assert run["engine"]["capabilities"]["token_ids"] is False
    cleanup = run["cleanup"]
    assert cleanup["verified"] and cleanup["server"]["port_free"]
    assert cleanup["server"]["survivors"] == []
    assert (tmp_path / "S" / "server-llama_cpp.log").exists()
    summary = json.loads((tmp_path / "S" / "summary.json").read_text())
    with_decode = [s for s in srv_samples.values() if s["output"]["tokens"] >= 2]
    assert with_decode and summary["speed"]["steady_decode_tps"]["n"] == len(with_decode)


def _kill_server_mid_run_then_resume(tmp_path: Path, gsm8k_path: Path,
                                         model_path: str) -> None:
    out = tmp_path / "R"
    args = ["run", "--suite", "gsm8k", "--data", str(gsm8k_path), "--limit", "3",
            "--max-tokens", "32", *served(model_path), "-o", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    samples = out / "samples.jsonl"
    wait_until(lambda: samples.exists() and samples.read_text().count("\n") >= 1, proc,
               "a sample")
    (leader,) = [p for p in psutil.Process(proc.pid).children() if "llama_cpp.server"
                 in " ".join(p.cmdline())]
    os.killpg(leader.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, err
    assert "exited with code -9" in err.strip().splitlines()[-1]
    run = json.loads((out / "run.json").read_text())
    kept = read_lines(samples)
    assert run["status"] == "failed" and 1 <= len(kept) < 3
    assert all(s["finish_reason"] != "error" for s in kept)
    ev = run["cleanup"]["server"]
    assert ev["exited_before_stop"] and ev["verified"] and ev["survivors"] == []
    assert not psutil.pid_exists(leader.pid) or leader.status() == psutil.STATUS_ZOMBIE
    r = abgate("run", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    final = read_lines(samples)
    assert len(final) == 3 and len({s["key"] for s in final}) == 3
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and run["cleanup"]["verified"]


@needs_server
@pytest.mark.server
@pytest.mark.engine
@pytest.mark.cost(17)
def test_launched_llama_cpp_server_runs(tmp_path: Path, gsm8k_path: Path,
                                       model_path: str) -> None:
    """Runs against a launched llama_cpp.server: the embedded engine's greedy answers
    with concurrency 2, and a server killed mid-run, then resumed."""
    (tmp_path / "same").mkdir()
    (tmp_path / "killed").mkdir()
    _same_greedy_answers_as_embedded_with_concurrency(tmp_path / "same", gsm8k_path,
                                                      model_path)
    _kill_server_mid_run_then_resume(tmp_path / "killed", gsm8k_path, model_path)
