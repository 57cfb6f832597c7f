"""Jobs spread over a pool of shards, their results taken in the jobs' order.

A shard is one place that can run a job whole: on one machine the A/B's engine
sessions, in a fleet each live replica's (both arms resident there, so a job's arms
never mix hardware). One shard runs the jobs in this thread, one after another, as
before fleets existed. Several run at once, one thread per shard, each shard one job at
a time, the next job to the first shard free; this thread takes the results in the
jobs' order, so whatever it writes is written in that order by one writer.

A job that fails with an :class:`~abgate.errors.AbgateError` (bad input, a refusal)
fails the pass, as on one machine. Any other error on a shard of several (its replica
or node lost: Ray's actor errors) drops that shard and runs the job again on another;
when no shard is left the last such error is raised.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from abgate.errors import AbgateError
from abgate.runner.execute import check_interrupted

S = TypeVar("S")  # a shard
T = TypeVar("T")  # a job's input
R = TypeVar("R")  # its result


class Shards(Generic[S]):
    """The pool; ``lost``: the shards dropped (their index and why), in order."""

    def __init__(self, shards: Sequence[S]) -> None:
        if not shards:
            raise ValueError("no shard to run on")
        self.shards = list(shards)
        self.lost: list[tuple[int, str]] = []
        self._free: queue.Queue[int] = queue.Queue()
        self._lock = threading.Lock()
        self._error: Exception = AbgateError("every shard lost")

    def in_order(self, items: Sequence[T], job: Callable[[S, T], R]
                 ) -> Iterator[tuple[T, R, int]]:
        """``(item, job(shard, item), shard index)`` for each item, in the items' order."""
        if len(self.shards) == 1:
            for item in items:
                check_interrupted()
                yield item, job(self.shards[0], item), 0
            return
        self._free = queue.Queue()  # this pass's: every shard not lost, free
        for i in sorted(set(range(len(self.shards))) - {i for i, _ in self.lost}):
            self._free.put(i)
        with ThreadPoolExecutor(len(self.shards), thread_name_prefix="abgate-shard") as ex:
            futures = [ex.submit(self._run, job, item) for item in items]
            try:
                for item, fut in zip(items, futures, strict=True):
                    result, index = _wait(fut)
                    yield item, result, index
            finally:
                for f in futures:
                    f.cancel()

    def _run(self, job: Callable[[S, T], R], item: T) -> tuple[R, int]:
        while True:
            i = self._take()
            try:
                result = job(self.shards[i], item)
            except AbgateError:
                self._free.put(i)
                raise
            except Exception as exc:  # the shard is gone: the item goes to another
                with self._lock:
                    self.lost.append((i, f"{type(exc).__name__}: {exc}"[:300]))
                    self._error = exc
                continue
            self._free.put(i)
            return result, i

    def _take(self) -> int:
        while True:
            with self._lock:
                if len(self.lost) == len(self.shards):
                    raise self._error
            try:
                return self._free.get(timeout=0.2)
            except queue.Empty:
                continue


def _wait(fut: Future[tuple[R, int]]) -> tuple[R, int]:
    """The result, Ctrl-C still heard (``check_interrupted``) while waiting."""
    while True:
        check_interrupted()
        try:
            return fut.result(timeout=0.5)
        except TimeoutError:
            continue
