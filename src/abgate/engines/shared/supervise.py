"""The supervisor between abgate and a server it launches (Linux).

``python -m abgate.engines.shared.supervise --parent PID --grace S -- ARGV...`` runs ARGV as
its child and makes two promises abgate alone cannot keep:

- **The whole tree stays tracked.** The supervisor is a *child subreaper*
  (``PR_SET_CHILD_SUBREAPER``): a descendant whose parent exits is re-parented to it,
  not to init, even after ``setsid`` or a double fork, so every process the server
  starts stays in the supervisor's tree, where abgate's tracker finds it.
- **Nothing outlives abgate.** Its parent-death signal (``PR_SET_PDEATHSIG``, SIGUSR1)
  arrives when abgate dies, SIGKILL included: the supervisor then sends SIGTERM to every
  descendant, SIGKILL after ``--grace`` seconds to what is left, reaps them and exits.

SIGTERM (abgate stopping the server) is forwarded to every descendant; abgate itself
escalates to SIGKILL after its grace. When the server (the first child) exits, the
supervisor ends whatever it left behind and exits with the server's exit code (128 + N
for a signal N), so abgate sees the server's own status.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

import psutil

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
PARENT_DIED = signal.SIGUSR1
_EVENTS: list[int] = []


def _prctl(option: int, value: int) -> bool:
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants() -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return list(psutil.Process().children(recursive=True))
    return []


def signal_all(sig: int, skip_group: int | None = None) -> None:
    """``sig`` to every descendant (but those in ``skip_group``: a process-group signal
    already reached them, and a second SIGTERM makes some servers quit ungracefully)."""
    for p in descendants():
        with contextlib.suppress(psutil.Error, OSError):
            if skip_group is None or os.getpgid(p.pid) != skip_group:
                p.send_signal(sig)


def reap() -> dict[int, int]:
    """Reap every exited child (orphans re-parented here included): pid -> exit code."""
    done: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = os.waitstatus_to_exitcode(status)


def end_tree(grace: float) -> None:
    """SIGTERM to every descendant, SIGKILL after ``grace`` s to what is left, reaped."""
    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while descendants() and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)
    for _ in range(100):  # SIGKILL until none is left (a new one may have been forked)
        if not descendants():
            break
        signal_all(signal.SIGKILL)
        time.sleep(0.05)
        reap()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _EVENTS.append(signum)


def supervise(argv: list[str], parent: int, grace: float) -> int:
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, int(PARENT_DIED))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, PARENT_DIED):
        signal.signal(sig, _on_signal)
    if os.getppid() != parent:  # abgate died before the parent-death signal was armed
        return 128 + int(PARENT_DIED)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"# abgate-supervise: cannot start {argv[0]!r}: {exc.strerror}", flush=True)
        return 127
    while True:
        exited = reap()
        if child.pid in exited:
            child.returncode = exited[child.pid]  # reaped here, not by Popen
            end_tree(grace)
            code = exited[child.pid]
            return code if code >= 0 else 128 - code
        if os.getppid() != parent:  # a lost parent-death signal: the check is the net
            _EVENTS.append(int(PARENT_DIED))
        while _EVENTS:
            event = _EVENTS.pop(0)
            if event == PARENT_DIED:
                end_tree(grace)
                return 128 + int(event)
            # abgate stopping the server (it escalates to SIGKILL itself): the processes
            # that left the group get the signal too
            signal_all(event, skip_group=os.getpgrp())
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(prog="abgate-supervise")
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--grace", type=float, default=10.0)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    sys.exit(supervise(argv, ns.parent, ns.grace))


if __name__ == "__main__":
    main()
