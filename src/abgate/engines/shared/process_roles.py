"""What an engine process is, from its title: a tensor-parallel rank, an engine core, a
helper that runs no engine code.

vLLM names its processes with ``setproctitle``: ``VLLM::EngineCore``, and one
``VLLM::Worker_TP0``, ``VLLM::Worker_TP1``, ... per rank (``Worker_PP1_TP0`` with
pipeline parallelism, ``_DP``/``_EP`` parts likewise; a lone ``Worker`` without
parallelism); SGLang likewise (``sglang::scheduler_TP0``). The title is the first word
of the process's command line. Python's ``multiprocessing`` helpers (the resource
tracker, the fork server) and torch inductor's compile workers load no engine code of
their own: they are *helpers*, recorded as such and exempt from a contract's "every
process maps this library" check. Everything else is a plain ``process``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

_TITLE = re.compile(r"^(VLLM|sglang)::(\w+)")
_RANK = re.compile(r"^(?P<what>[A-Za-z]+?)(?:_(?P<rank>(?:(?:DP|PP|PCP|TP|DCP|EP)\d+_?)+))?$")
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver",
            "multiprocessing.semaphore_tracker", "torch._inductor.compile_worker")
HELPER = "helper"
SUPERVISOR, SERVER = "supervisor", "server"
# Roles abgate knows by pid (a launched server and the supervisor it runs under): the
# title cannot tell a server's main process from any other process.
_DECLARED: dict[int, str] = {}


def declare(pid: int, role: str) -> None:
    """``pid`` is a process of ``role`` (``server``, ``supervisor``) from now on."""
    _DECLARED[pid] = role


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def process_role(name: str, cmdline: Sequence[str],
                 pid: int | None = None) -> tuple[str, str | None]:
    """``(role, rank)`` of one process: a declared role by ``pid`` (``server``,
    ``supervisor``), ``("worker", "TP1")`` for vLLM's rank 1, ``("engine_core", None)``,
    ``("helper", None)``, ``("process", None)`` otherwise."""
    if pid is not None and pid in _DECLARED:
        return _DECLARED[pid], None
    first = cmdline[0].strip() if cmdline else ""
    for title in (first, name):
        found = _TITLE.match(title)
        if found:
            parts = _RANK.match(found.group(2))
            if parts is None:
                return _snake(found.group(2)), None
            rank = (parts.group("rank") or "").rstrip("_") or None
            return _snake(parts.group("what")), rank
    text = " ".join(cmdline)
    if any(h in text for h in _HELPERS):
        return HELPER, None
    return "process", None


def parallel_sizes(roles: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """The tensor- and pipeline-parallel sizes an engine runs with, seen from its
    processes' ranks (``TP0``, ``TP1``: 2; ``PP1_TP0``: pipeline 2): what a launched
    server really started, for a contract's ``tensor_parallel_size`` and
    ``pipeline_parallel_size``. ``{}`` when no process carries a known engine's title
    (a llama.cpp server, say): nothing is claimed then."""
    titled = [(role, rank) for role, rank in roles if role not in ("process", HELPER)]
    if not titled:
        return {}
    sizes = {"TP": 1, "PP": 1}
    for _, rank in titled:
        for kind, index in re.findall(r"(TP|PP)(\d+)", rank or ""):
            sizes[kind] = max(sizes[kind], int(index) + 1)
    return {"tensor_parallel_size": sizes["TP"], "pipeline_parallel_size": sizes["PP"],
            "parallel_sizes_from": "the ranks in the server's process titles"}
