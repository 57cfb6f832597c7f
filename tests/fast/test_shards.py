"""``ab.shards.Shards``: jobs spread over shards, results in the jobs' order, a lost shard's
job run on another, a refusal (AbgateError) failing the pass as on one machine."""

from __future__ import annotations

import threading
import time

import pytest

from abgate.ab.shards import Shards
from abgate.errors import AbgateError


def test_one_shard_runs_in_this_thread_in_order() -> None:
    seen: list[tuple[str, int]] = []

    def job(shard: str, item: int) -> int:
        seen.append((threading.current_thread().name, item))
        return item * 10

    out = list(Shards(["only"]).in_order([3, 1, 2], job))
    assert out == [(3, 30, 0), (1, 10, 0), (2, 20, 0)]
    assert {name for name, _ in seen} == {threading.current_thread().name}


def test_several_shards_share_the_work_and_results_keep_the_items_order() -> None:
    busy: dict[int, int] = {0: 0, 1: 0, 2: 0}
    lock = threading.Lock()
    overlap = []

    def job(shard: int, item: int) -> int:
        with lock:
            busy[shard] += 1
            overlap.append(busy[shard])
        time.sleep(0.02 if item % 3 else 0.05)  # uneven jobs finish out of order
        with lock:
            busy[shard] -= 1
        return item

    pool = Shards([0, 1, 2])
    out = list(pool.in_order(list(range(12)), job))
    assert [item for item, _, _ in out] == list(range(12))
    assert [result for _, result, _ in out] == list(range(12))
    assert {shard for _, _, shard in out} == {0, 1, 2}  # every shard took some
    assert max(overlap) == 1  # one job per shard at a time
    assert pool.lost == []


def test_a_lost_shard_s_job_runs_on_another_and_the_loss_is_kept() -> None:
    def job(shard: str, item: int) -> tuple[str, int]:
        if shard == "dead":
            raise ConnectionError("actor died")
        time.sleep(0.01)
        return shard, item

    pool = Shards(["dead", "alive"])
    out = list(pool.in_order([1, 2, 3, 4], job))
    assert [r for _, r, _ in out] == [("alive", 1), ("alive", 2), ("alive", 3), ("alive", 4)]
    assert [i for i, _ in pool.lost] == [0] and "ConnectionError: actor died" in pool.lost[0][1]


def test_every_shard_lost_raises_the_last_error() -> None:
    def job(shard: int, item: int) -> int:
        raise ConnectionError(f"shard {shard} died")

    with pytest.raises(ConnectionError, match="died"):
        list(Shards([0, 1]).in_order([1, 2, 3], job))


def test_a_refusal_fails_the_pass_and_is_not_retried() -> None:
    calls: list[int] = []

    def job(shard: int, item: int) -> int:
        calls.append(item)
        if item == 2:
            raise AbgateError("bad item 2")
        return item

    pool = Shards([0, 1])
    with pytest.raises(AbgateError, match="bad item 2"):
        list(pool.in_order([1, 2, 3], job))
    assert calls.count(2) == 1 and pool.lost == []
