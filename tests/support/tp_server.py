"""A stand-in for a tensor-parallel server (``vllm serve --tensor-parallel-size N``), for
the CPU: the leader maps a shared library, starts N rank processes titled as vLLM titles
its workers (``VLLM::Worker_TP0``, ... as their first command-line word), each of which
maps the library too (``--skip-rank R``: rank R does not), and then answers the OpenAI API
with :class:`tests.support.fault_server.FaultServer`'s canned tokens. ``--helper`` also
starts Python's multiprocessing resource tracker (a helper, as vLLM's spawn context
does). Trailing words (a test's marker) are passed to every rank.

``python -m tests.support.tp_server --port P --ranks 2 --lib L --pids F [MARKER]``; the
ranks' pids go to F as JSON (``{"TP0": pid, ...}``) before the server listens.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import subprocess
import sys
from pathlib import Path

from tests.support.fault_server import FaultServer

RANK = ("import ctypes, sys, time\n"
        "if sys.argv[1]:\n"
        "    ctypes.CDLL(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n")


def start_ranks(n: int, lib: str, skip: int | None, extra: list[str]) -> dict[str, int]:
    """N rank processes; argv[0] is the title vLLM gives its workers."""
    pids, procs = {}, []
    for i in range(n):
        title = f"VLLM::Worker_TP{i}" if n > 1 else "VLLM::Worker"
        mapped = "" if i == skip else lib
        proc = subprocess.Popen([title, "-c", RANK, mapped, *extra], executable=sys.executable,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        pids[f"TP{i}"] = proc.pid
        procs.append(proc)
    for proc in procs:  # every rank has mapped its library before the server listens
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.stdout.close()
    return pids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--lib", default="")
    ap.add_argument("--skip-rank", type=int)
    ap.add_argument("--pids", type=Path, required=True)
    ap.add_argument("--helper", action="store_true")
    a, extra = ap.parse_known_args()
    if a.lib:
        ctypes.CDLL(a.lib)
    if a.helper:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    pids = start_ranks(a.ranks, a.lib, a.skip_rank, extra)
    a.pids.write_text(json.dumps(pids))
    print(f"tp stand-in: {a.ranks} ranks {pids}", flush=True)
    asyncio.run(FaultServer(port=a.port, vary=True).serve())


if __name__ == "__main__":
    main()
