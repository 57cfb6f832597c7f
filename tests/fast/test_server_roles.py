"""A launched server's record names the supervisor and the server apart: the evidence's
``pid`` is the real server's, the supervisor is labeled ``supervisor`` and the server's
own process (and its mapped libraries) ``server``. Real processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from abgate.engines.shared import server
from abgate.provenance.libmaps import snapshot_pids
from tests.test_openai_engine import FAKE_SERVER


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor is Linux's")
def test_supervisor_and_server_are_named_apart(tmp_path: Path) -> None:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    s = server.launch(f"{sys.executable} {script} --port {{port}}", model="", args={},
                      log_dir=tmp_path, ready_timeout=30, grace_s=1.0)
    try:
        assert s.supervised
        pids = s.pids()
        server_pid = pids[0]
        assert psutil.Process(server_pid).ppid() == s.proc.pid  # the supervisor's child
        assert str(script) in " ".join(psutil.Process(server_pid).cmdline())
        libs = {m.pid: m.role for m in snapshot_pids(pids)}
        assert libs[server_pid] == "server", libs
    finally:
        ev = s.stop()
    assert ev["pid"] == server_pid and ev["supervisor_pid"] == s.proc.pid != os.getpid()
    roles = {p["pid"]: p["role"] for p in ev["processes"]}
    assert roles[s.proc.pid] == "supervisor" and roles[server_pid] == "server", roles
