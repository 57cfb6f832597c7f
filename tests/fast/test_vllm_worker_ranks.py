"""The ranks a vLLM worker reports (engines/vllm/worker_facts._ranks), read from vLLM 0.26's
group coordinators (``vllm.distributed.parallel_state.get_tp_group`` / ``get_pp_group``).
vLLM cannot run on this CPU, so its module is a stand-in holding only those two functions;
on the H200 the real worker reported tp_rank 0 and pp_rank 0 (docs/gpu.md). 0.26 has no
``get_pipeline_model_parallel_rank``: importing it made both ranks null there."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from abgate.engines.vllm.worker_facts import _ranks


def _stand_in(monkeypatch: pytest.MonkeyPatch, tp: int, pp: int) -> None:
    ps = types.ModuleType("vllm.distributed.parallel_state")
    ps.get_tp_group = lambda: types.SimpleNamespace(rank_in_group=tp)  # type: ignore[attr-defined]
    ps.get_pp_group = lambda: types.SimpleNamespace(rank_in_group=pp)  # type: ignore[attr-defined]
    dist = types.ModuleType("vllm.distributed")
    dist.parallel_state = ps  # type: ignore[attr-defined]
    vllm = types.ModuleType("vllm")
    vllm.distributed = dist  # type: ignore[attr-defined]
    for name, mod in (("vllm", vllm), ("vllm.distributed", dist),
                      ("vllm.distributed.parallel_state", ps)):
        monkeypatch.setitem(sys.modules, name, mod)


def test_ranks_from_the_group_coordinators(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, tp=1, pp=2)
    worker: Any = types.SimpleNamespace(rank=5, local_rank=1)
    assert _ranks(worker) == {"rank": 5, "local_rank": 1, "tp_rank": 1, "pp_rank": 2}


def test_ranks_outside_a_worker_are_null(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm fails
    worker: Any = types.SimpleNamespace(rank=0, local_rank=0)
    assert _ranks(worker)["tp_rank"] is None and _ranks(worker)["pp_rank"] is None
