"""Managed inference servers: ``--launch "CMD ... --port {port}"``.

A launched server runs in its own process group on a free loopback port, writes its
log into the run directory, and is waited for until ``/v1/models`` answers (and
``/health``, where the server has one, is not failing). Stopping it is verified, not
assumed: SIGTERM to the group, SIGKILL after a grace period, then a check that no
process of its tree survives, that its port is free again and, where NVIDIA GPUs are
visible through NVML, that device memory is back near its pre-launch level. The
result of those checks is the *cleanup evidence* that ends up in ``run.json``.

Safety nets: :meth:`ManagedServer.stop` is idempotent and also registered with
``atexit``; on Linux the server runs under :mod:`abgate.engines.shared.supervise`, a child
subreaper whose parent-death signal ends the server's whole tree (late ``setsid``
children and ``sh -c 'server | cat'`` pipelines included) if abgate itself is killed
outright.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import psutil

from abgate import safefs
from abgate.engines.shared import http
from abgate.engines.shared import process_roles as roles
from abgate.engines.shared import supervise as supervise
from abgate.engines.shared.multicast import server_env
from abgate.engines.shared.process_roles import process_role
from abgate.engines.shared.server_cleanup import (
    HOST,
    MARKER_ENV,
    ProcessTracker,
    free_port,
    gpu_memory,
    gpu_returned,
    port_is_free,
)
from abgate.engines.shared.server_command import PLACEHOLDERS as PLACEHOLDERS
from abgate.engines.shared.server_command import arg_flags as arg_flags
from abgate.engines.shared.server_command import build_command, server_name
from abgate.engines.shared.server_command import detect_bool_style as detect_bool_style
from abgate.errors import AbgateError, UsageError
from abgate.redact import argv_secrets, env_secrets, redact_text

_PR_SET_PDEATHSIG = 1


def _libc_prctl() -> Any:
    """``prctl`` resolved in the parent: the child only calls it between fork and exec."""
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def die_with_parent() -> None:  # in the child between fork and exec: SIGTERM when abgate dies
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _set_supervisor_pdeathsig() -> None:  # the supervisor's: it ends the tree on it
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(supervise.PARENT_DIED))


def supervised(argv: Sequence[str], grace_s: float) -> list[str] | None:
    """``argv`` run under :mod:`abgate.engines.shared.supervise` (a subreaper that ends the
    server's whole tree when abgate dies, SIGKILL included); None off Linux."""
    if sys.platform != "linux" or _PRCTL is None:
        return None
    return [sys.executable, "-I", supervise.__file__, "--parent", str(os.getpid()),
            "--grace", str(grace_s), "--", *argv]


# -- the managed server ---------------------------------------------------------------


class ManagedServer:
    """One launched server process group. Construct = start."""

    def __init__(self, argv: Sequence[str], shown: Sequence[str], port: int, log_path: Path,
                 grace_s: float = 10.0, secrets: Sequence[str] = ()) -> None:
        self.argv, self.shown, self.port = list(argv), list(shown), port
        self.log_path, self.grace_s = log_path, grace_s
        self._secrets = [x for x in secrets if x]
        self.base_url = f"http://{HOST}:{port}"
        self.evidence: dict[str, Any] | None = None
        self.ready_s: float | None = None
        self._gpu_before = gpu_memory()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = os.fdopen(safefs.open_append(log_path), "ab")  # no link
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        self._log.write(f"# abgate {stamp}: launching {shlex.join(self.shown)}\n".encode())
        self._log.flush()
        self._t_start = time.monotonic()
        # inherited by every process the server starts: found even re-parented outside
        # its group (server_cleanup.ProcessTracker)
        self.marker = uuid.uuid4().hex
        wrapped = supervised(self.argv, grace_s)
        self.supervised = wrapped is not None
        self._server_pid: int | None = None
        try:
            if shutil.which(self.argv[0]) is None:
                raise FileNotFoundError(errno.ENOENT, "not found (not on PATH, or not an "
                                        "executable file)")
            self.proc = subprocess.Popen(
                wrapped or self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, start_new_session=True,
                env=server_env({**os.environ, MARKER_ENV: self.marker}),
                preexec_fn=(_set_supervisor_pdeathsig if self.supervised
                            else die_with_parent if _PRCTL is not None else None))
        except OSError as exc:
            self._log.close()
            raise UsageError(f"--launch: cannot start {self.argv[0]!r}: {exc.strerror}") from None
        self.tracker = ProcessTracker(self.proc.pid, self.proc.pid, self.marker, self._secrets)
        roles.declare(self.proc.pid, roles.SUPERVISOR if self.supervised else roles.SERVER)
        self.tracker.refresh()
        atexit.register(self.stop)

    # -- state ----------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        """The server's live process tree, leader first (the supervisor, which is
        abgate's and not the server's, left out)."""
        self.tracker.refresh()
        tree = [self.proc.pid] if self.alive() else []
        with contextlib.suppress(psutil.Error):
            tree += [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        if self.supervised and len(tree) > 1:
            self._server_pid = tree[1]  # the supervisor's child: the server
            roles.declare(tree[1], roles.SERVER)
        return tree[1:] if self.supervised else tree

    def server_pid(self) -> int:
        """The server's own pid (the supervisor's child when supervised)."""
        return int(self._server_pid or self.proc.pid)

    def roles(self) -> list[tuple[str, str | None]]:
        """``(role, rank)`` of every live process of the server's tree
        (:mod:`abgate.engines.shared.process_roles`)."""
        out = []
        for pid in self.pids():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                out.append(process_role(p.name(), p.cmdline(), pid))
        return out

    def died_within(self, timeout: float) -> bool:
        """Whether the leader has exited, waiting up to ``timeout`` for it to do so."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def log_tail(self, lines: int = 6, width: int = 600) -> str:
        """The server log's last non-empty lines, joined into one line."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - 16384))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        kept = [ln.strip() for ln in text.splitlines()
                if ln.strip() and not ln.startswith("# abgate")][-lines:]
        return redact_text(" | ".join(kept), self._secrets)[-width:] or "(empty log)"

    def _scrub_log(self) -> None:
        """Servers print their arguments and settings (vLLM does, keys among them): the
        log kept in the run directory goes through :func:`abgate.redact.redact_text`
        with the values known to be secret."""
        with contextlib.suppress(OSError, AbgateError):  # a link there: refused, left
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            clean = redact_text(text, self._secrets)
            if clean != text:
                safefs.write_atomic(self.log_path, clean.encode("utf-8"))

    def failure(self, what: str) -> AbgateError:
        """An error naming the log and its tail, after stopping and verifying cleanup."""
        tail = self.log_tail()
        evidence = self.stop()
        err = AbgateError(f"{what} (log: {self.log_path}); last lines: {tail}; "
                          f"cleanup {'verified' if evidence['verified'] else 'NOT verified'}")
        err.cleanup_evidence = evidence  # type: ignore[attr-defined]
        return err

    def wait_ready(self, timeout: float, headers: Mapping[str, str] | None = None) -> float:
        """Wait until the server answers; returns the seconds it took."""
        deadline = time.monotonic() + timeout
        seen_at = 0.0
        with http.client(base_url=self.base_url, timeout=5.0, headers=headers) as client:
            while True:
                if time.monotonic() - seen_at >= 1.0:  # workers seen while they start
                    self.tracker.refresh()
                    seen_at = time.monotonic()
                code = self.proc.poll()
                if code is not None:
                    raise self.failure(f"the launched server exited with code {code} "
                                       "before it was ready")
                if _ready(client):
                    self.tracker.refresh()
                    self.ready_s = round(time.monotonic() - self._t_start, 3)
                    return self.ready_s
                if time.monotonic() >= deadline:
                    raise self.failure(f"the launched server was not ready after {timeout:g} s")
                time.sleep(0.25)

    # -- stopping -------------------------------------------------------------------

    def stop(self) -> dict[str, Any]:
        """Stop the process group and verify; idempotent (later calls return the same
        evidence)."""
        if self.evidence is not None:
            return self.evidence
        t0 = time.monotonic()
        self.pids()  # the server's pid noted while it runs
        exit_before = self.proc.poll()
        signals: list[dict[str, Any]] = []
        for sig, wait in ((signal.SIGTERM, self.grace_s), (signal.SIGKILL, 10.0)):
            self.tracker.refresh()  # a child started since (the supervisor still holds it)
            if not self.tracker.survivors():
                break
            self.tracker.kill_all(sig)
            signals.append({"signal": sig.name, "after_s": round(time.monotonic() - t0, 3)})
            if self.tracker.wait_gone(wait):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        self.evidence = self._verify(exit_before, signals, t0)
        self._log.write(f"# abgate: stopped; cleanup {json.dumps(self.evidence)}\n".encode())
        self._log.close()
        self._scrub_log()
        atexit.unregister(self.stop)
        return self.evidence

    def _verify(self, exit_before: int | None, signals: list[dict[str, Any]],
                t0: float) -> dict[str, Any]:
        survivors = self.tracker.survivors()
        deadline = time.monotonic() + 5.0
        while not (free := port_is_free(self.port)) and time.monotonic() < deadline:
            time.sleep(0.1)
        gpu = gpu_returned(self._gpu_before)
        verified = not survivors and free and gpu.get("returned", True) is not False
        return {
            "kind": "managed_server",
            "command": self.shown,
            "pid": self.server_pid(),  # the server's; its supervisor's apart
            "supervisor_pid": self.proc.pid if self.supervised else None,
            "pgid": self.proc.pid,
            "supervised": self.supervised,
            "port": self.port,
            "log": str(self.log_path),
            "exited_before_stop": exit_before is not None,
            "exit_code": self.proc.returncode,
            "signals": signals,
            "grace_s": self.grace_s,
            "stop_s": round(time.monotonic() - t0, 3),
            "processes_tracked": len(self.tracker.seen),
            "processes": self.tracker.processes(),
            "tracked_by": f"process tree, process group {self.proc.pid} and {MARKER_ENV}",
            "ready": self.ready_s is not None,
            "survivors": survivors,
            "port_free": free,
            "gpu": gpu,
            "verified": verified,
        }


def _ready(client: httpx.Client) -> bool:
    """``/v1/models`` lists a model and ``/health`` (where it exists) is not failing."""
    try:
        health = client.get("/health")
        if health.status_code >= 500:
            return False
        models = client.get("/v1/models")
        return models.status_code == 200 and bool(models.json().get("data"))
    except (httpx.HTTPError, ValueError):
        return False


def launch(template: str, *, model: str, args: Mapping[str, Any], log_dir: Path | None,
           ready_timeout: float, grace_s: float = 10.0, bool_style: str = "auto",
           api_key: str | None = None,
           headers: Mapping[str, str] | None = None) -> ManagedServer:
    """Start a server from ``template`` and wait until it is ready. On failure the
    process group is stopped and verified before the error is raised."""
    port = free_port()
    argv, shown = build_command(template, port=port, model=model, args=args,
                                bool_style=bool_style, api_key=api_key)
    if log_dir is None:
        import tempfile

        log_dir = Path(tempfile.gettempdir())
    # What the log may echo: the key, the values hidden in the command, and the values
    # of secret-named variables the server inherits (--env overrides included).
    secrets = [api_key or "", *argv_secrets(argv), *env_secrets(os.environ)]
    server = ManagedServer(argv, shown, port, log_dir / f"server-{server_name(argv)}.log",
                           grace_s, secrets=secrets)
    try:
        server.wait_ready(ready_timeout, headers)
    except BaseException:
        server.stop()
        raise
    return server
