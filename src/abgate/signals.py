"""Ctrl-C and SIGTERM for the whole command, start-up included (standard library only,
so ``abgate.cli.main`` installs it before any heavy import).

Outside a tracked run (``runner.execute.tracked`` has its own, finer handler) a signal
raises :class:`Stopped` at once, except inside :func:`deferred` (the finishing step:
verdict, reports, ledger entry), where the first signal is noted and raised when the
step is done, so the records it writes are whole; a second one stops at once. An
interruption exits :data:`INTERRUPTED` (130, as the README documents), by SIGINT or
SIGTERM alike; the message names the signal.

``ABGATE_TEST_PAUSE_AT=NAME`` (tests only) makes :func:`pause_point` ``NAME`` print
``abgate-test: paused at NAME`` on stderr and wait up to 60 s, ending early when a
signal arrives, so a test can send a real signal at that moment (once per process).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_NAMES: dict[int, str] = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
_PAUSED: set[str] = set()


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM during a run. A BaseException, like KeyboardInterrupt, so that
    an engine's per-request ``except Exception`` cannot turn it into an error sample."""


class Stopped(BaseException):
    """A signal outside a tracked run. ``done``: it came while finishing, and the
    finishing was completed first (nothing is left to resume); ``out``: the directory
    whose finishing it cut short (``--resume`` completes it)."""

    def __init__(self, signum: int, done: bool = False, out: os.PathLike[str] | None = None
                 ) -> None:
        super().__init__(f"signal {signum}")
        self.signum, self.done, self.out = signum, done, out


class _State:
    received: list[int] = []  # every signal since install(), oldest first
    depth = 0  # nesting of deferred()
    noted_at = 0  # len(received) when the outermost deferred() began


def name(signum: int | None) -> str:
    return _NAMES.get(signum or signal.SIGINT, f"signal {signum}")


def note(signum: int) -> None:
    """Remember ``signum`` (the tracked run's handler calls this too: the test hook and
    :func:`deferred` count them)."""
    _State.received.append(signum)


INTERRUPTED = 130


def _handler(signum: int, frame: FrameType | None) -> None:
    note(signum)
    if _State.depth and len(_State.received) - _State.noted_at < 2:
        return  # finishing: noted, raised when the step is done
    raise Stopped(signum)


def install() -> dict[int, Any]:
    """Handle SIGINT and SIGTERM as :class:`Stopped` (a signal ignored when abgate
    started, as for a background job or nohup, stays ignored); returns the handlers
    replaced, for :func:`restore`."""
    _State.received, _State.depth, _State.noted_at = [], 0, 0
    previous: dict[int, Any] = {}
    for s in _SIGNALS:
        current = signal.getsignal(s)
        if current is not signal.SIG_IGN:
            try:
                signal.signal(s, _handler)
            except ValueError:  # not the main thread (main() called from a thread)
                break
            previous[s] = current
    return previous


def restore(previous: dict[int, Any]) -> None:
    for s, h in previous.items():
        signal.signal(s, h)


@contextmanager
def deferred() -> Iterator[None]:
    """A step whose writes must not be torn by a signal: a first signal during it is
    raised (as ``Stopped(done=True)``) once it has finished; a second stops at once."""
    if _State.depth == 0:
        _State.noted_at = len(_State.received)
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
    if _State.depth == 0 and len(_State.received) > _State.noted_at:
        raise Stopped(_State.received[_State.noted_at], done=True)


def pause_point(point: str) -> None:
    """The test hook (``ABGATE_TEST_PAUSE_AT``); nothing unless it names ``point``."""
    if os.environ.get("ABGATE_TEST_PAUSE_AT") != point or point in _PAUSED:
        return
    _PAUSED.add(point)  # once per process
    seen = len(_State.received)
    print(f"abgate-test: paused at {point}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_State.received) == seen:
        time.sleep(0.02)
