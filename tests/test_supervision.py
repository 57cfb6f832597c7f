"""No launched process outlives abgate (issue 26, item 5): the server runs under a
subreaper supervisor, so a daemon it starts late (``setsid`` and a double fork) stays
tracked and is stopped, and a SIGKILL of abgate still ends a ``sh -c 'server | cat'``
pipeline and frees its port."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from abgate.engines.shared import server as server
from abgate.engines.shared import server_cleanup as server_cleanup
from tests.conftest import read_lines
from tests.test_openai_engine import FAKE_SERVER
from tests.test_server_launch import cmd, processes_with

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor is Linux's")

LATE_DAEMON = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port, marker = int(sys.argv[sys.argv.index("--port") + 1]), sys.argv[-1]

def daemon():  # setsid + double fork, after the server was found ready
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)",
                                      marker])
        os._exit(0)

class H(BaseHTTPRequestHandler):
    served = 0
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        H.served += 1
        if H.served == 2:
            daemon()

HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _daemons(marker: str) -> list[psutil.Process]:
    found = []
    for p in processes_with(marker):
        with contextlib.suppress(psutil.Error):
            if "time.sleep(600)" in " ".join(p.cmdline()):
                found.append(p)
    return found


def _gone(marker: str, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not processes_with(marker)


def test_late_setsid_daemon_is_tracked_and_stopped(tmp_path: Path) -> None:
    script = tmp_path / "late_daemon.py"
    script.write_text(LATE_DAEMON)
    marker = f"m{uuid.uuid4().hex[:8]}"
    s = server.launch(f"{sys.executable} {script} --port {{port}} {marker}", model="", args={},
                      log_dir=tmp_path, ready_timeout=30, grace_s=2.0)
    try:
        deadline = time.monotonic() + 30
        while not _daemons(marker):  # it starts once the server was polled again
            httpx.get(f"{s.base_url}/v1/models", timeout=10)
            assert time.monotonic() < deadline
            time.sleep(0.1)
        daemon = _daemons(marker)[0]
        assert daemon.ppid() == s.proc.pid  # re-parented to the supervisor, not to init
        assert daemon.pid in s.pids()
    finally:
        ev = s.stop()
    assert ev["supervised"] and ev["verified"] and ev["survivors"] == [], ev
    assert _gone(marker, 5.0)


def test_sigkill_of_abgate_ends_a_shell_pipeline_server(tmp_path: Path) -> None:
    fake = tmp_path / "fake_server.py"
    fake.write_text(FAKE_SERVER)
    marker = f"m{uuid.uuid4().hex[:8]}"
    launch = f"sh -c '{cmd(fake, '--delay 0.05', marker)} 2>&1 | cat'"
    out = tmp_path / "R"
    args = ["run", "--suite", "synthetic", "--limit", "4", "--max-tokens", "40",
            "--engine", "openai", "--launch", launch, "-o", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "abgate", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ((out / "samples.jsonl").exists() and read_lines(out / "samples.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    servers = processes_with(marker)
    ports = {c.laddr.port for p in servers for c in p.net_connections("tcp")
             if c.status == psutil.CONN_LISTEN}
    assert servers and ports
    proc.kill()
    proc.wait(timeout=30)
    assert _gone(marker), [p.cmdline() for p in processes_with(marker)]
    assert all(server_cleanup.port_is_free(port) for port in ports)
