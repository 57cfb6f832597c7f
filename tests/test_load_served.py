"""Served load shapes against a real llama.cpp ``llama-server`` with 4 slots."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from abgate.bench.load import arrival_schedule, max_in_flight, parse_load, serve_metrics
from abgate.bench.load_run import LoadJob, load_prompts, read_samples, run_load
from tests.conftest import llama_server_binary, requested_threads

pytestmark = pytest.mark.engine
GSM8K = "/work/shared/data/gsm8k/test.jsonl"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(model_path: str) -> Iterator[str]:
    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built (tests/tools/build_llama_server.sh)")
    port = _port()
    proc = subprocess.Popen([str(binary), "-m", model_path, "--port", str(port), "-np", "4",
                             "-c", "2048", "-t", str(requested_threads(1) or 1)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.poll() is not None


def _job(url: str, spec_text: str, n: int) -> LoadJob:
    spec = parse_load(spec_text, num_prompts=n, seed=3)
    prompts, source, idx = load_prompts(GSM8K if Path(GSM8K).exists() else None, n, 3)
    return LoadJob(url, None, prompts, source, idx, spec, output_len=6)


def _concurrency_4_keeps_4_in_flight(server: str, tmp_path: Path) -> None:
    rec = run_load(_job(server, "concurrency:4", 8), tmp_path)
    raw = read_samples(tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "load_samples.jsonl").read_text().splitlines()]
    assert len(raw) == 8 and all(r.ok for r in raw), [x["error"] for x in lines]
    assert max_in_flight(raw) == 4 == rec["max_in_flight_observed"]
    # the server saw 4 at once: the 4 first requests' streams overlap in time
    first = sorted(raw, key=lambda r: r.t_send)[:4]
    assert max(r.t_send for r in first) < min(r.t_end for r in first)
    assert len(set(rec["prompts"]["indices"])) == 8
    again = serve_metrics(raw, rec["metrics"]["duration_s"])
    assert again == json.loads((tmp_path / "load.json").read_text())["metrics"]


def _poisson_arrivals_follow_the_seeded_schedule(server: str, tmp_path: Path) -> None:
    job = _job(server, "poisson:8", 6)
    rec = run_load(job, tmp_path)
    assert rec["schedule_s"] == arrival_schedule(job.spec)
    lines = [json.loads(x) for x in (tmp_path / "load_samples.jsonl").read_text().splitlines()]
    for line in lines:  # sent at its due time (never before, little after)
        assert line["due_s"] <= line["t_send_s"] < line["due_s"] + 0.25


def test_closed_and_open_loop_load_on_one_server(server: str, tmp_path: Path) -> None:
    """One llama-server with 4 slots: a closed loop of 4 keeps 4 in flight, then Poisson
    arrivals are sent on their seeded schedule."""
    (tmp_path / "closed").mkdir()
    (tmp_path / "open").mkdir()
    _concurrency_4_keeps_4_in_flight(server, tmp_path / "closed")
    _poisson_arrivals_follow_the_seeded_schedule(server, tmp_path / "open")
