"""The reaper of a local cluster abgate started itself: a small process that waits for
the coordinator to end (any way, SIGKILL included) and then stops every process of that
cluster still alive (Ray's own agents can outlive a killed driver).

``python -m abgate.fleet.reaper COORDINATOR_PID PID...``"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys

import psutil


def reap(pids: list[int], timeout: float = 3.0) -> list[int]:
    """Terminate, then kill, every process in the trees of ``pids``; the survivors."""
    procs: list[psutil.Process] = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs.extend([root, *root.children(recursive=True)])
        except psutil.Error:
            continue
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _, alive = psutil.wait_procs(alive, timeout=timeout)
    return [p.pid for p in alive]


def start(coordinator: int, pids: list[int]) -> subprocess.Popen[bytes]:
    """The reaper of ``pids``, watching ``coordinator`` (in its own session: a Ctrl-C
    to the coordinator's group does not stop it)."""
    return subprocess.Popen([sys.executable, "-m", "abgate.fleet.reaper", str(coordinator),
                             *map(str, pids)], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    coordinator, pids = int(argv[0]), [int(a) for a in argv[1:]]
    seen = watch(coordinator, pids)
    return 1 if reap(seen) else 0


def watch(coordinator: int, pids: list[int]) -> list[int]:
    """Until ``coordinator`` ends: every process in the trees of ``pids`` (a raylet's
    agents are reparented when it dies, so they are noted while it lives)."""
    seen = set(pids)
    try:
        parent = psutil.Process(coordinator)
    except psutil.Error:
        return sorted(seen)
    while parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
        for pid in list(seen):
            try:
                seen.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        try:
            parent.wait(timeout=0.5)
        except psutil.TimeoutExpired:
            continue
        except psutil.Error:
            break
    return sorted(seen)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
