"""bench --load's client against a scripted SSE server on loopback: what it sends, the
warm-up pass, where a request's latency ends, one connection per request in flight,
and samples written off the event loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from abgate.bench import load_run
from abgate.bench.load import parse_load
from abgate.bench.load_run import LoadJob, read_samples, run_load
from abgate.errors import AbgateError, UsageError

TAIL_S = 0.3  # the server's pause between the finish chunk and the usage chunk


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.peers: set[tuple[str, int]] = set()
        self.fail = False
        self.drop_reused = 0  # requests on a kept-alive connection closed unanswered
        self.drop_all = False  # every request's connection closed unanswered
        self.silent: set[int] = set()  # tokens streamed with empty text (vLLM: special ones)
        self.finish_alone = False  # the finish reason in a last, empty chunk (llama.cpp)
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send_json({"data": [{"id": "m", "owned_by": "vllm"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reused, self.served = getattr(self, "served", 0) > 0, getattr(self, "served", 0) + 1
        with self.server.lock:
            if self.server.drop_all or (reused and self.server.drop_reused > 0):
                self.server.drop_reused -= 1  # as llama-server can, at times
                self.close_connection = True
                return
            self.server.bodies.append(body)
            self.server.arrivals.append(time.perf_counter())
            self.server.peers.add(self.client_address)
        if self.server.fail:
            self._send_json({"error": "nope"}, 500)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = int(body["max_tokens"])
        for i in range(n):
            fin = "length" if i == n - 1 and not self.server.finish_alone else None
            text = "" if i in self.server.silent else f"t{i}"
            self._event({"choices": [{"index": 0, "text": text, "finish_reason": fin}]})
        if self.server.finish_alone:
            self._event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        time.sleep(TAIL_S)
        self._event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, doc: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(self, doc: Any, status: int = 200) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _job(srv: _Server, n: int = 6, c: int = 2, warmup: int = 0) -> LoadJob:
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    spec = parse_load(f"concurrency:{c}", num_prompts=n)
    return LoadJob(url, None, [f"p{i}" for i in range(n)], "test", list(range(n)), spec,
                   output_len=4, warmup=warmup)


def test_warm_up_requests_go_first_and_are_not_measured(server: _Server,
                                                        tmp_path: Path) -> None:
    rec = run_load(_job(server, n=6, c=2, warmup=3), tmp_path)
    assert len(server.bodies) == 9 and len(read_samples(tmp_path)) == 6
    assert rec["warmup_requests"] == 3 and rec["metrics"]["completed"] == 6
    first_measured = min(server.arrivals[3:])
    assert max(server.arrivals[:3]) < first_measured
    assert rec["t0_perf_counter"] > max(server.arrivals[:3])


def test_sends_what_vllm_bench_serve_sends_and_no_token_ids(server: _Server,
                                                            tmp_path: Path) -> None:
    run_load(_job(server), tmp_path)
    body = server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 4
    assert body["temperature"] == 0.0 and "prompt" in body
    assert "return_token_ids" not in body


def test_latency_ends_at_the_last_choice_not_at_done(server: _Server, tmp_path: Path) -> None:
    rec = run_load(_job(server, n=2, c=2), tmp_path)
    for r in read_samples(tmp_path):
        assert r.t_last is not None and r.t_last == r.t_chunks[-1]
        assert r.t_end - r.t_last >= TAIL_S * 0.9  # the usage chunk came later
    e2el = rec["metrics"]["e2el_ms"]["mean"]
    assert e2el < TAIL_S * 1e3  # the tail after the finish chunk is not in it


def test_a_token_of_empty_text_is_a_token_as_vllm_bench_serve_counts_it(
        server: _Server, tmp_path: Path) -> None:
    """vLLM streams a chunk of empty text for a special token (ignore_eos runs past
    EOS) or a held-back character; its client stamps it, so TTFT is that chunk's time,
    not the next token's; a last, empty chunk carrying only the finish reason is none."""
    server.silent = {0, 2}
    run_load(_job(server, n=2, c=2), tmp_path)
    for r in read_samples(tmp_path):
        assert len(r.t_chunks) == r.output_tokens == 4  # TTFT: the empty first chunk's
    server.silent, server.finish_alone = set(), True
    run_load(_job(server, n=2, c=2), tmp_path, force=True)
    assert all(len(r.t_chunks) == 4 for r in read_samples(tmp_path))


def test_one_connection_per_request_in_flight(server: _Server, tmp_path: Path) -> None:
    run_load(_job(server, n=8, c=2, warmup=2), tmp_path)
    assert len(server.peers) == 2  # warm-up and measured requests share 2 connections


def test_samples_are_written_off_the_event_loop(server: _Server, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = load_run.append_line

    def spy(path: Path, data: bytes) -> None:
        threads.append(threading.current_thread().name)
        real(path, data)

    monkeypatch.setattr(load_run, "append_line", spy)
    run_load(_job(server, n=4, c=2), tmp_path)
    assert len(threads) == 4 and threading.main_thread().name not in threads
    assert sorted(json.loads(x)["index"] for x in
                  (tmp_path / "load_samples.jsonl").read_text().splitlines()) == [0, 1, 2, 3]


def test_a_failed_warm_up_stops_the_bench_in_one_line(server: _Server, tmp_path: Path) -> None:
    server.fail = True
    with pytest.raises(AbgateError, match="warm-up request") as exc:
        run_load(_job(server, warmup=1), tmp_path)
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "load.json").exists()


def test_negative_warm_up_is_a_usage_error(server: _Server, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--warmup -1"):
        run_load(_job(server, warmup=-1), tmp_path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    return subprocess.run([sys.executable, "-m", "abgate", "bench", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_cli_warmup_flag_reaches_the_load_bench(server: _Server, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(3)))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    common = ["--engine", "openai", "--endpoint", url, "--load", "concurrency:2",
              "--num-prompts", "3", "--load-data", str(prompts), "--output-len", "4"]
    ok = _cli(*common, "--warmup", "2", "-o", str(tmp_path / "run"))
    assert ok.returncode == 0, ok.stderr
    rec = json.loads((tmp_path / "run" / "load.json").read_text())
    assert rec["warmup_requests"] == 2 and len(server.bodies) == 5
    bad = _cli(*common, "--warmup", "-1", "-o", str(tmp_path / "bad"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--warmup -1" in bad.stderr


def test_client_processes_share_the_slots_and_one_writer(server: _Server,
                                                        tmp_path: Path) -> None:
    job = replace(_job(server, n=10, c=4, warmup=2), procs=2)
    rec = run_load(job, tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "load_samples.jsonl").read_text().splitlines()]
    assert sorted(x["index"] for x in lines) == list(range(10))
    assert {x["client_proc"] for x in lines} == {0, 1} and rec["client_procs"] == 2
    assert len(server.bodies) == 12 and rec["metrics"]["completed"] == 10
    assert 2 <= rec["max_in_flight_observed"] <= 4


def test_client_processes_keep_poisson_due_times(server: _Server, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    spec = parse_load("poisson:20", num_prompts=6, seed=1)
    job = LoadJob(url, None, [f"p{i}" for i in range(6)], "test", list(range(6)), spec,
                  output_len=2, procs=2)
    run_load(job, tmp_path)
    for x in map(json.loads, (tmp_path / "load_samples.jsonl").read_text().splitlines()):
        assert x["due_s"] <= x["t_send_s"] and x["client_proc"] == x["index"] % 2


def test_more_client_processes_than_slots_is_a_usage_error(server: _Server,
                                                          tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--client-procs 3: expected 1 to 2"):
        run_load(replace(_job(server, c=2), procs=3), tmp_path)


def test_a_kept_alive_connection_closed_unanswered_is_retried_once(server: _Server,
                                                                  tmp_path: Path) -> None:
    """The server closes a reused connection without answering (HTTP/1.1's keep-alive
    race): the request goes again on a new connection, counted, its latency from the
    first send; a second unanswered close is a failed request, not a third attempt."""
    server.drop_reused = 1
    rec = run_load(_job(server, n=3, c=1), tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "load_samples.jsonl").read_text().splitlines()]
    assert [x["attempts"] for x in sorted(lines, key=lambda x: x["index"])] == [1, 2, 1]
    assert all(x["ok"] for x in lines) and len(server.bodies) == 3
    assert rec["metrics"]["completed"] == 3 and rec["metrics"]["retried"] == 1
    assert rec["metrics"] == load_run.serve_metrics(read_samples(tmp_path),
                                                    rec["metrics"]["duration_s"])
    server.drop_all = True
    rec = run_load(_job(server, n=2, c=1), tmp_path / "again")
    lines = [json.loads(x) for x in (tmp_path / "again" / "load_samples.jsonl").read_text()
             .splitlines()]
    assert rec["metrics"]["failed"] == 2 and len(server.bodies) == 3
    assert all(x["attempts"] == 2 and "ServerDisconnectedError" in x["error"] and
               x["t_end_s"] >= x["t_send_s"] for x in lines)
