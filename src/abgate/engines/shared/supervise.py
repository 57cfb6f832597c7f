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

``--watch PID:START ... --log FILE`` is the same promise for an in-process engine's
workers (vLLM's EngineCore and its tensor-parallel ranks are abgate's own children, so
no subreaper can hold them): a watchdog that, when abgate dies, ends the listed
processes still alive (the start time guards against a reused pid) and writes what it
did into FILE; abgate stops it with SIGTERM when it closes the engine itself
(:func:`start_watchdog`).
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


def _say(why: str, first: list[int], killed: set[int], survivors: list[int],
         log: str | None = None) -> None:
    line = (f"# abgate-supervise: {why}: SIGTERM to {len(first)} process(es) {first}, "
            f"SIGKILL to {len(killed)} {sorted(killed)}; "
            + (f"SURVIVING: {survivors}" if survivors else "no process survives"))
    if log is None:
        print(line, flush=True)
        return
    with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def end_tree(grace: float, why: str) -> None:
    """SIGTERM to every descendant, SIGKILL after ``grace`` s to what is left, reaped;
    then one line to the server log (this process's stdout) saying what was ended and
    that nothing survives, or which pids do."""
    first = sorted(p.pid for p in descendants())
    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while descendants() and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)
    killed: set[int] = set()
    for _ in range(100):  # SIGKILL until none is left (a new one may have been forked)
        left = descendants()
        if not left:
            break
        killed.update(p.pid for p in left)
        signal_all(signal.SIGKILL)
        time.sleep(0.05)
        reap()
    _say(why, first, killed, sorted(p.pid for p in descendants()))


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
            end_tree(grace, f"the server exited ({exited[child.pid]})")
            code = exited[child.pid]
            return code if code >= 0 else 128 - code
        if os.getppid() != parent:  # a lost parent-death signal: the check is the net
            _EVENTS.append(int(PARENT_DIED))
        while _EVENTS:
            event = _EVENTS.pop(0)
            if event == PARENT_DIED:
                end_tree(grace, f"abgate (pid {parent}) died")
                return 128 + int(event)
            # abgate stopping the server (it escalates to SIGKILL itself): the processes
            # that left the group get the signal too
            signal_all(event, skip_group=os.getpgrp())
        time.sleep(0.05)


def _alive(targets: dict[int, float]) -> list[psutil.Process]:
    out = []
    for pid, created in targets.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def end_watched(targets: dict[int, float], grace: float, why: str, log: str | None) -> None:
    """SIGTERM to the watched processes still alive, SIGKILL after ``grace`` s, and the
    line saying so in ``log``."""
    first = _alive(targets)
    for p in first:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, left = psutil.wait_procs(first, timeout=grace)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=5.0)
    _say(why, sorted(p.pid for p in first), {p.pid for p in left},
         sorted(p.pid for p in _alive(targets)), log)


def watch(targets: dict[int, float], parent: int, grace: float, log: str | None) -> int:
    """Until abgate (``parent``) dies, then :func:`end_watched`; SIGTERM (abgate closing
    the engine itself, whose workers are then the engine's to stop) ends it quietly."""
    _prctl(PR_SET_PDEATHSIG, int(PARENT_DIED))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is abgate's to handle
    for sig in (signal.SIGTERM, PARENT_DIED):
        signal.signal(sig, _on_signal)
    while True:
        if os.getppid() != parent:  # died before the signal was armed, or it was lost
            _EVENTS.append(int(PARENT_DIED))
        while _EVENTS:
            if _EVENTS.pop(0) != PARENT_DIED:
                return 0
            # the signal also comes when the thread that started us exits: abgate itself
            # must be gone (re-parented away) before anything is ended
            if os.getppid() != parent:
                end_watched(targets, grace, f"abgate (pid {parent}) died", log)
                return 128 + int(PARENT_DIED)
        time.sleep(0.1)


def start_watchdog(workers: dict[int, tuple[float, str]], log: str | None,
                   grace: float = 10.0) -> subprocess.Popen[bytes] | None:
    """The watchdog of an in-process engine's ``workers`` (pid -> start time, command),
    started from abgate; None off Linux or with no worker."""
    if sys.platform != "linux" or not workers:
        return None
    targets = [f"{pid}:{created!r}" for pid, (created, _) in sorted(workers.items())]
    cmd = [sys.executable, "-I", __file__, "--parent", str(os.getpid()), "--grace", str(grace),
           "--watch", *targets, *(["--log", log] if log else [])]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="abgate-supervise")
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--grace", type=float, default=10.0)
    ap.add_argument("--watch", nargs="+", metavar="PID:START")
    ap.add_argument("--log")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    if ns.watch:
        targets = {int(t.split(":")[0]): float(t.split(":")[1]) for t in ns.watch}
        sys.exit(watch(targets, ns.parent, ns.grace, ns.log))
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    sys.exit(supervise(argv, ns.parent, ns.grace))


if __name__ == "__main__":
    main()
