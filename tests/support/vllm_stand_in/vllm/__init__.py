"""A stand-in for vLLM on the CPU (tests only: ``tests/test_vllm_tp_cli.py`` puts its
parent directory on PYTHONPATH of an ``abgate run --engine vllm`` subprocess).

``LLM(model, tensor_parallel_size=T, pipeline_parallel_size=P)`` starts T x P real rank
processes titled as vLLM titles its workers (``VLLM::Worker_TP0``, ...; their first
command-line word), each mapping the library named by ``ABGATE_STAND_IN_LIB`` (all but the
rank named by ``ABGATE_STAND_IN_SKIP``), as this process does, and returns once every rank
is up. Requests go through ``llm_engine.add_request`` / ``step`` (one token per request
per step, 20 ms a step); ``engine_core.shutdown()`` ends the ranks. ``vllm_config`` holds
the parallel sizes as given.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
import types
from typing import Any

__version__ = "0.0-stand-in"
_RANK = ("import ctypes, sys, time\nif sys.argv[1]:\n    ctypes.CDLL(sys.argv[1])\n"
         "print('ready', flush=True)\ntime.sleep(600)\n")


class SamplingParams:
    def __init__(self, **kw: Any) -> None:
        self.kw = kw


class _Tokenizer:
    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool,
                            tokenize: bool) -> list[int]:
        return [1, *(len(m["content"]) % 250 for m in messages), 2]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % 250 for c in text]


class _Engine:
    def __init__(self, tp: int, pp: int, procs: list[subprocess.Popen[str]]) -> None:
        ns = types.SimpleNamespace
        self.live: dict[str, dict[str, Any]] = {}
        self.vllm_config = ns(parallel_config=ns(tensor_parallel_size=tp,
                                                 pipeline_parallel_size=pp,
                                                 distributed_executor_backend="mp"),
                              model_config=ns(dtype="bfloat16", max_model_len=2048,
                                              hf_config=None, quantization=None))
        self.engine_core = ns(shutdown=lambda: _stop(procs))

    def add_request(self, rid: str, prompt: dict[str, list[int]], params: SamplingParams) -> None:
        self.live[rid] = {"ids": [], "max": params.kw["max_tokens"]}

    def step(self) -> list[Any]:
        time.sleep(0.02)
        outs = []
        for rid, st in list(self.live.items()):
            st["ids"].append(7)
            done = len(st["ids"]) >= st["max"]
            comp = types.SimpleNamespace(token_ids=list(st["ids"]), text="7" * len(st["ids"]),
                                         finish_reason="length" if done else None)
            outs.append(types.SimpleNamespace(request_id=rid, finished=done, outputs=[comp]))
            if done:
                del self.live[rid]
        return outs


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.terminate()
        proc.communicate(timeout=10)


class LLM:
    def __init__(self, model: str, **kw: Any) -> None:
        lib = os.environ.get("ABGATE_STAND_IN_LIB", "")
        skip = os.environ.get("ABGATE_STAND_IN_SKIP")
        if lib:
            ctypes.CDLL(lib)
        tp = int(kw.get("tensor_parallel_size") or 1)
        pp = int(kw.get("pipeline_parallel_size") or 1)
        procs = []
        for p in range(pp):
            for t in range(tp):
                rank = "_".join(x for x in (f"PP{p}" if pp > 1 else "", f"TP{t}" if tp > 1 else "")
                                if x)
                title = f"VLLM::Worker_{rank}" if rank else "VLLM::Worker"
                procs.append(subprocess.Popen([title, "-c", _RANK, "" if rank == skip else lib],
                                              executable=sys.executable, stdout=subprocess.PIPE,
                                              stdin=subprocess.DEVNULL, text=True))
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        self.llm_engine = _Engine(tp, pp, procs)

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()
