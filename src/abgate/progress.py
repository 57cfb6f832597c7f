"""Progress for long jobs, on any console.

On a terminal (stderr a TTY) a live rich bar on stderr: done/total, tokens/s, ETA. On
anything else (a CI log, ``| tee``, ``nohup``) a plain line on stderr every
``every_s`` seconds or every ``every_frac`` of the total, whichever comes first, with
done/total, the rate and the ETA. Either way the run log (``run.log``) gets the same
plain lines. A job may have several phases (an A/B's samples, then its scoring pass):
``on_start(done, total, phase)`` begins one.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from abgate.visible import visible

log = logging.getLogger("abgate.progress")
EVERY_S = 30.0  # a plain line at least this often while samples finish...
EVERY_FRAC = 0.1  # ...and at every tenth of the total
INTERVAL_ENV = "ABGATE_PROGRESS_SECONDS"  # overrides EVERY_S


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _every_s() -> float:
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    try:
        return max(float(raw), 0.0) if raw else EVERY_S
    except ValueError:
        return EVERY_S


class Produced(Protocol):
    """What progress counts: a sample line's model (``records.samples.Sample``, a bench's
    ``BenchSample`` or ``ProbeLine``) or a :class:`Step`, each saying its output tokens."""

    def produced_tokens(self) -> int: ...


@dataclass(frozen=True)
class Step:
    """One step of work that is no sample line (a scoring pass's sequence): its tokens."""

    tokens: int

    def produced_tokens(self) -> int:
        return self.tokens


def sample_tokens(sample: Produced) -> int:
    """Output tokens of a sample (a run's, a bench's or a probe's line) or a step."""
    return sample.produced_tokens()


class Reporter:
    """Callbacks the runners call: ``on_start(done, total[, phase])`` and
    ``on_sample(sample)``. ``bar`` is the live bar (a terminal) or None (plain lines on
    ``stream``)."""

    def __init__(self, label: str, bar: Progress | None, stream: TextIO | None = None,
                 every_s: float | None = None, every_frac: float = EVERY_FRAC) -> None:
        self.label, self.bar, self.stream = visible(label), bar, stream  # a path's ESC too
        self.every_s = _every_s() if every_s is None else every_s
        self.every_frac = every_frac
        self.task: Any = None
        self.phase = ""
        self.total = self.done = self.tokens = self.started_done = 0
        self.t0 = self._last_t = time.perf_counter()
        self._last_done = 0
        self.lines: list[str] = []  # every plain line written (what run.log got too)

    @property
    def name(self) -> str:
        return f"{self.label} {self.phase}" if self.phase else self.label

    def on_start(self, done: int, total: int, phase: str = "") -> None:
        """Begin (a phase of) the job: ``done`` of ``total`` steps are already done."""
        if self.bar is not None and self.task is not None:
            self.bar.stop_task(self.task)
        self.phase, self.done, self.total, self.started_done = phase, done, total, done
        self.tokens = 0
        self.t0 = self._last_t = time.perf_counter()
        self._last_done = done
        self._first: tuple[float, int, int] | None = None  # (time, done, tokens) at step 1
        if self.bar is not None:
            self.task = self.bar.add_task(self.name, total=total, completed=done, tps="")
        self._line(f"{self.name}: {done}/{total} done, starting")

    def on_sample(self, sample: Produced) -> None:
        self.done += 1
        self.tokens += sample_tokens(sample)
        if self._first is None:  # rates count from here: loading and warm-up excluded
            self._first = (time.perf_counter(), self.done, self.tokens)
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, advance=1, tps=f"{self.tokens / elapsed:6.1f} tok/s")
        if self._due():
            self._line(self.status_line())

    def _due(self) -> bool:
        now = time.perf_counter()
        step = max(1, int(self.total * self.every_frac)) if self.total else 1
        if (self.done >= self.total or self.done - self._last_done >= step
                or now - self._last_t >= self.every_s):
            self._last_done, self._last_t = self.done, now
            return True
        return False

    def status_line(self) -> str:
        """``ab demo: 12/80 (15%), 0.41/s, 27.3 tok/s, elapsed 0:29, ETA 2:45``: rates
        over the steps after the first one (so a slow load or warm-up does not skew the
        ETA); the first step's line has no rate yet."""
        now = time.perf_counter()
        parts = [f"{self.name}: {self.done}/{self.total}"
                 + (f" ({100 * self.done / self.total:.0f}%)" if self.total else "")]
        t1, done1, tokens1 = self._first or (now, self.done, self.tokens)
        span, rate = now - t1, 0.0
        if self.done > done1 and span > 0:
            rate = (self.done - done1) / span
            parts.append(f"{rate:.2f}/s")
            if self.tokens > tokens1:
                parts.append(f"{(self.tokens - tokens1) / span:.1f} tok/s")
        parts.append(f"elapsed {_clock(now - self.t0)}")
        left = self.total - self.done
        if left > 0:
            parts.append(f"ETA {_clock(left / rate)}" if rate > 0 else "ETA after the next")
        return ", ".join(parts)

    def _line(self, text: str) -> None:
        self.lines.append(text)
        log.info("%s", text)
        if self.bar is None and self.stream is not None:
            print(f"abgate: {text}", file=self.stream, flush=True)


@contextmanager
def reporter(label: str, tty: bool | None = None, stream: TextIO | None = None,
             every_s: float | None = None) -> Iterator[Reporter]:
    """A :class:`Reporter` for one command: the live bar when ``tty`` (default: whether
    stderr is a terminal), else plain lines on ``stream`` (default: stderr)."""
    err = sys.stderr if stream is None else stream
    if tty is None:
        tty = err.isatty()
    if not tty:
        yield Reporter(label, None, err, every_s)
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[tps]}"), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), transient=False,
                   console=Console(file=err, stderr=stream is None))
    with bar:
        yield Reporter(label, bar, err, every_s)
