"""A replica: one Ray actor owning one engine session per arm, both resident.

The actor is built from the same prepared configs the A/B checked
(``runner.session.prepare_engine``); it answers one item at a time (both arms, in the
order the coordinator gives) and reports its host facts, process tree, mapped libraries
and, when closed, the engines' cleanup and GPU-memory evidence."""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

import psutil

from abgate import host
from abgate.engines.base import GenerationRequest, GenerationResult
from abgate.records import facts
from abgate.records.fleet import ReplicaFacts
from abgate.runner.session import EngineSession, PreparedEngine, loaded

Work = list[tuple[str, GenerationRequest]]
# the engine members the coordinator may call on an arm (fleet.remote_engine)
CALLS = frozenset({"generate", "tokenize", "render_prompt", "describe", "score", "processes",
                   "detokenize", "topk_trace", "keep_prompt_states"})


class Replica:
    """Wrapped by ``ray.remote`` in :mod:`abgate.fleet.coordinator`."""

    def __init__(self, index: int, prepared: dict[str, PreparedEngine],
                 warmup: list[tuple[str, GenerationRequest]]) -> None:
        self.index = index
        self.stack = ExitStack()
        self.sessions: dict[str, EngineSession] = {
            arm: self.stack.enter_context(loaded(p)) for arm, p in prepared.items()}
        for arm, request in warmup:  # not recorded: the coordinator notes how many
            self.generate(arm, request)

    def generate(self, arm: str, request: GenerationRequest) -> GenerationResult:
        session = self.sessions[arm]
        with session.env():
            return session.engine.generate([request])[0]

    def run_item(self, work: Work) -> list[tuple[str, GenerationResult]]:
        """Both arms of one (item, seed), in the given order."""
        return [(arm, self.generate(arm, request)) for arm, request in work]

    def call(self, arm: str, op: str, args: tuple[Any, ...]) -> Any:
        """One engine member of ``arm`` under its env (``fleet.remote_engine``)."""
        session = self.sessions[arm]
        with session.env():
            if op == "prompts_restored":
                return session.engine.prompts_restored
            if op not in CALLS:
                raise ValueError(f"replica: no engine member {op!r}")
            return getattr(session.engine, op)(*args)

    def engine_facts(self, into: ReplicaFacts) -> ReplicaFacts:
        """``into`` with each arm's engine as loaded here: name and version, the
        effective configuration's digest (matched across replicas)."""
        into.engines = {arm: {"version": s.described.version, "engine": s.described.name}
                        for arm, s in self.sessions.items()}
        into.engine_config = {arm: config_digest(s.described.effective_config)
                              for arm, s in self.sessions.items()}
        return into

    def facts(self) -> ReplicaFacts:
        """Where this replica runs and what it runs on: the matching keys and the record."""
        pids = sorted({os.getpid(), *(p for s in self.sessions.values() for p in s.processes)})
        out = self.engine_facts(host_facts(self.index))
        out.process_tree, out.libraries = process_tree(pids), libraries(pids)
        return out

    def close(self) -> dict[str, Any]:
        """Close every engine; their cleanup evidence and the GPU memory after."""
        self.stack.close()
        return {"cleanup": {arm: s.engine.cleanup_evidence for arm, s in self.sessions.items()},
                "gpu_memory_after": [{k: g.get(k) for k in ("index", "memory_used")}
                                     for g in host.gpus()]}


def host_facts(index: int) -> ReplicaFacts:
    """The host facts of the Ray worker this runs in: node, address, CPU, the GPUs Ray
    gave it (their UUIDs from NVML), driver."""
    import ray

    ctx = ray.get_runtime_context()
    gpus, ids = host.gpus(), [str(g) for g in ray.get_gpu_ids()]
    uuids = host.gpu_uuids()  # the replica's own GPUs (Ray's ids: indices, or UUIDs)
    return ReplicaFacts(
        index=index, node_id=ctx.get_node_id(), address=ray.util.get_node_ip_address(),
        pid=os.getpid(), actor_id=ctx.get_actor_id(), cpu_model=host.cpu_model(),
        gpu_ids=ids,
        gpu_uuids=[uuids.get(i, i) for i in ids if i in uuids or i.startswith("GPU-")],
        # host.gpus(): NVML's facts of each GPU, as the host section records them
        gpu_model=host.gpu_models(gpus), driver=host.gpu_drivers(gpus))


def config_digest(config: Any) -> str:
    """SHA-256 of an engine's effective configuration as loaded on this host, the keys
    that name one load (a port, an endpoint: ``records.facts.must_match``) left out."""
    import hashlib
    import json

    kept = {k: v for k, v in dict(config or {}).items() if facts.must_match(f"effective.{k}")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def process_tree(pids: list[int]) -> list[int]:
    """Every live pid in the trees rooted at ``pids`` (psutil)."""
    found: set[int] = set()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            found.add(pid)
            found.update(c.pid for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    return sorted(found)


def libraries(pids: list[int]) -> dict[str, str]:
    """The engine libraries mapped in this replica's processes: basename -> SHA-256 (the
    sorted SHA-256s, comma-joined, when files of one basename differ: e.g. two wheels'
    vendored copies; keeping whichever was seen first made alike replicas differ, seen
    with 4 replicas on the 16-core machine). Unreadable ones (no hash) and those a JIT
    compiler built in the process (:func:`jit_built`) are left out."""
    from abgate.provenance.libmaps import snapshot_pids

    return facts.libraries((lib.path, lib.sha256) for worker in snapshot_pids(pids)
                           for lib in worker.libs if not jit_built(lib.path))


# Where JIT compilers put the shared objects they build in each process (Triton's launchers
# and cuda_utils, TorchInductor's kernels): their bytes differ between alike replicas (seen:
# two vLLM replicas on one H200 refused as "differing in libraries" by
# __triton_launcher*.so), so they say nothing of the host.
_JIT_DIRS = ("/.triton/", "/triton/cache/", "/torchinductor_", "/.cache/vllm/")


def jit_built(path: str) -> bool:
    return any(d in path for d in _JIT_DIRS)
