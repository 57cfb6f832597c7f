"""Progress for long jobs: a live bar on a TTY (done/total, tokens/s, ETA); on a
non-TTY nothing on screen, and a line in the run log every ~10%."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = logging.getLogger("abgate.progress")


class Reporter:
    """Callbacks the runner calls: ``on_start(done, total)`` and ``on_sample(sample)``."""

    def __init__(self, label: str, bar: Progress | None) -> None:
        self.label, self.bar = label, bar
        self.task: Any = None
        self.total = self.done = self.tokens = 0
        self.t0 = time.perf_counter()
        self._logged_tenths = 0

    def on_start(self, done: int, total: int) -> None:
        self.done, self.total, self.t0 = done, total, time.perf_counter()
        if self.bar is not None:
            self.task = self.bar.add_task(self.label, total=total, completed=done, tps="")

    def on_sample(self, sample: dict[str, Any]) -> None:
        self.done += 1
        output = sample.get("output")
        tokens = output.get("tokens") if isinstance(output, dict) else sample.get("output_tokens")
        self.tokens += int(tokens or 0)
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        tps = self.tokens / elapsed
        if self.bar is not None:
            self.bar.update(self.task, advance=1, tps=f"{tps:6.1f} tok/s")
        elif self.total and self.done * 10 // self.total > self._logged_tenths:
            log.info("%s: %d/%d samples, %.1f output tok/s", self.label, self.done, self.total,
                     tps)
            self._logged_tenths = self.done * 10 // self.total


@contextmanager
def reporter(label: str, tty: bool | None = None) -> Iterator[Reporter]:
    if tty is None:
        tty = sys.stderr.isatty()
    if not tty:
        yield Reporter(label, None)
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[tps]}"), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), transient=False)
    with bar:
        yield Reporter(label, bar)
