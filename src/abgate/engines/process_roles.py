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
from collections.abc import Sequence

_TITLE = re.compile(r"^(VLLM|sglang)::(\w+)")
_RANK = re.compile(r"^(?P<what>[A-Za-z]+?)(?:_(?P<rank>(?:(?:DP|PP|PCP|TP|DCP|EP)\d+_?)+))?$")
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver",
            "multiprocessing.semaphore_tracker", "torch._inductor.compile_worker")
HELPER = "helper"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def process_role(name: str, cmdline: Sequence[str]) -> tuple[str, str | None]:
    """``(role, rank)`` of one process: ``("worker", "TP1")`` for vLLM's rank 1,
    ``("engine_core", None)``, ``("helper", None)``, ``("process", None)`` otherwise."""
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
