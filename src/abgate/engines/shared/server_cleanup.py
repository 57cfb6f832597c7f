"""Verifying that a stopped server (or an in-process engine's workers) left nothing
behind: processes, listening ports, GPU memory.

:class:`ProcessTracker` remembers every process seen in a server's tree or process
group, or carrying the server's environment marker (``ABGATE_SERVER_ID``, set for the
launched leader and inherited by everything it starts), so survivors are found even
after their parent died and they were re-parented *and* left the group with ``setsid``
(a worker started through a short-lived intermediate). A process that clears its own
environment and leaves the group while its parent is gone is out of reach. Ports are
checked by binding them (TIME_WAIT leftovers do not count). GPU memory is read through
NVML (``pynvml`` from ``nvidia-ml-py``) where it is installed and a driver is present, per
device (index, UUID, before and after, tolerance, returned); otherwise the evidence says
why it was not checked. Every process seen is listed per pid (command with secrets
hidden, role and rank from its title, whether it exited).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from abgate.engines.shared.process_roles import HELPER, process_role
from abgate.host import NvmlUnavailable, nvml
from abgate.redact import redact_text

HOST = "127.0.0.1"
MARKER_ENV = "ABGATE_SERVER_ID"
GPU_TOLERANCE_BYTES = 256 << 20


def free_port() -> int:
    """A currently free loopback TCP port (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _alive(pid: int, created: float) -> bool:
    """The process ``pid`` started at ``created`` still runs (a zombie does not)."""
    try:
        p = psutil.Process(pid)
        return bool(p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class ProcessTracker:
    """Remembers every process seen in a tree or process group, so that survivors can
    be found even after their parent died and they were re-parented."""

    def __init__(self, root_pid: int, pgid: int | None, marker: str | None = None,
                 secrets: Sequence[str] = ()) -> None:
        self.root_pid, self.pgid, self.marker = root_pid, pgid, marker
        self.secrets = list(secrets)  # hidden in the commands the evidence shows
        self.seen: dict[int, tuple[float, str]] = {}

    def _ours(self, p: psutil.Process) -> bool:
        with contextlib.suppress(OSError, psutil.Error):
            if self.pgid is not None and os.getpgid(p.pid) == self.pgid:
                return True
        if self.marker is not None and p.pid != os.getpid():
            with contextlib.suppress(OSError, psutil.Error):
                return bool(p.environ().get(MARKER_ENV) == self.marker)
        return False

    def refresh(self) -> None:
        found: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.root_pid)
            found += [root, *root.children(recursive=True)]
        if self.pgid is not None or self.marker is not None:
            found += [p for p in psutil.process_iter() if self._ours(p)]
        for p in found:
            note_process(self.seen, p)

    def processes(self) -> list[dict[str, Any]]:
        """Every process seen, per pid: its command, role and rank, and whether it has
        exited."""
        return per_process(self.seen, self.secrets)

    def survivors(self) -> list[dict[str, Any]]:
        return [{"pid": pid, "cmd": redact_text(cmd, self.secrets)}
                for pid, (ct, cmd) in self.seen.items() if _alive(pid, ct)]

    def kill_all(self, sig: int) -> None:
        if self.pgid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pgid, sig)
        for pid, (ct, _) in self.seen.items():
            if _alive(pid, ct):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    def wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.survivors():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


def _uuid(nv: Any, handle: Any) -> str | None:
    try:
        raw = nv.nvmlDeviceGetUUID(handle)
    except Exception:  # not every driver answers
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def gpu_memory() -> dict[str, Any]:
    """Used memory per NVIDIA device through NVML (``used_bytes`` by index, and
    ``devices``: index, UUID, used bytes), or why it could not be read."""
    try:
        with nvml() as (nv, handles):
            devices = [{"index": i, "uuid": _uuid(nv, h),
                        "used_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).used)}
                       for i, h in enumerate(handles)]
    except NvmlUnavailable as exc:
        return {"available": False, "reason": str(exc)}
    if not devices:
        return {"available": False, "reason": "NVML sees no device"}
    return {"available": True, "used_bytes": [d["used_bytes"] for d in devices],
            "devices": devices}


def _per_device(before: Mapping[str, Any], after: Mapping[str, Any],
                tolerance: int) -> list[dict[str, Any]]:
    """One line per device seen before load: its reading before and after, and whether
    it is back within ``tolerance`` (a device NVML no longer shows is not)."""
    now = {d.get("uuid") or d["index"]: d for d in after.get("devices") or []}
    out = []
    for d in before.get("devices") or [{"index": i, "uuid": None, "used_bytes": b}
                                       for i, b in enumerate(before["used_bytes"])]:
        seen = now.get(d.get("uuid") or d["index"])
        used = None if seen is None else seen["used_bytes"]
        out.append({"index": d["index"], "uuid": d.get("uuid"), "before_bytes": d["used_bytes"],
                    "after_bytes": used, "tolerance_bytes": tolerance,
                    "returned": used is not None and used <= d["used_bytes"] + tolerance})
    return out


def gpu_returned(before: Mapping[str, Any], wait_s: float = 30.0,
                 tolerance: int = GPU_TOLERANCE_BYTES) -> dict[str, Any]:
    """Wait until every device's used memory is back within ``tolerance`` of ``before``;
    the evidence has the totals by index and one line per device (``devices``)."""
    if not before.get("available"):
        return {"checked": False, "reason": before.get("reason")}
    deadline = time.monotonic() + wait_s
    while True:
        after = gpu_memory()
        devices = _per_device(before, after, tolerance) if after.get("available") else []
        ok = bool(devices) and all(d["returned"] for d in devices)
        if ok or time.monotonic() >= deadline:
            return {"checked": True, "returned": ok,
                    "before_bytes": before["used_bytes"],
                    "after_bytes": after.get("used_bytes"),
                    "tolerance_bytes": tolerance, "devices": devices}
        time.sleep(0.5)


def per_process(seen: Mapping[int, tuple[float, str]],
                secrets: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Cleanup evidence per process seen (pid -> start time, command): pid, command
    (secrets hidden, :func:`abgate.redact.redact_text`), role and rank
    (:mod:`abgate.engines.shared.process_roles`), whether it exited."""
    out = []
    for pid, (created, cmd) in sorted(seen.items()):
        role, rank = process_role("", cmd.split(" ")[:1], pid)
        out.append({"pid": pid, "cmd": redact_text(cmd, secrets), "role": role, "rank": rank,
                    "exited": not _alive(pid, created)})
    return out


def child_pids() -> set[int]:
    """PIDs of every descendant of this process."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def running(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def new_children(before: set[int], seen: dict[int, tuple[float, str]]) -> None:
    """Add to ``seen`` (pid -> start time, command) every descendant of this process
    that is not in ``before``: an engine's workers, noted while they live so that the
    cleanup check knows them even after they exited or were re-parented."""
    for p in psutil.Process().children(recursive=True):
        if p.pid not in before:
            note_process(seen, p)


def note_process(seen: dict[int, tuple[float, str]], p: psutil.Process) -> None:
    """Note ``p`` in ``seen`` (pid -> start time, command). A process seen before keeps
    its first command unless it has since taken a title (vLLM and SGLang set theirs with
    ``setproctitle`` after they start: ``VLLM::EngineCore``, ``VLLM::Worker_TP1``), so
    the evidence names what it became, with its role and rank."""
    with contextlib.suppress(psutil.Error):
        created = p.create_time()
        old = seen.get(p.pid)
        if old is not None and old[0] == created and titled(old[1]):
            return
        cmd = " ".join(p.cmdline())[:200] or p.name()
        if old is None or old[0] != created or titled(cmd):
            seen[p.pid] = (created, cmd)


def titled(cmd: str) -> bool:
    """Whether a command line starts with an engine's process title (a role, a rank)."""
    return process_role("", cmd.split(" ")[:1])[0] not in ("process", HELPER)


def _seen_processes(seen: Mapping[int, tuple[float, str]]) -> list[psutil.Process]:
    found = []
    for pid, (created, _) in seen.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if p.create_time() == created:
                found.append(p)
    return found


def verify_children_gone(before: set[int],
                         seen: Mapping[int, tuple[float, str]] | None = None) -> dict[str, Any]:
    """Worker processes vLLM started (engine core, TP workers) must be gone after close:
    those in ``seen`` (noted while they ran) and any other new descendant. Stragglers
    get SIGTERM, then SIGKILL, and are reported."""
    seen = dict(seen or {})
    new_children(before, seen)
    spawned = _seen_processes(seen)
    deadline = time.monotonic() + 10.0
    while any(running(p) for p in spawned) and time.monotonic() < deadline:
        time.sleep(0.1)
    signals = []
    for sig in ("terminate", "kill"):
        alive = [p for p in spawned if running(p)]
        for p in alive:
            signals.append({"pid": p.pid, "signal": sig})
            with contextlib.suppress(psutil.Error):
                getattr(p, sig)()
        psutil.wait_procs(alive, timeout=5.0)
    return {"kind": "in_process", "pid": os.getpid(), "workers_seen": len(seen),
            "workers": per_process(seen),
            "signals": signals, "survivors": [p.pid for p in spawned if running(p)]}
