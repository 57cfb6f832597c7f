"""Per-rank precision facts of a loaded vLLM engine, collected from every worker through
``LLM.collective_rpc`` (:func:`rank_facts`), recorded as ``effective_config["ranks"]``.

:func:`worker_facts` runs in each worker (``fn(worker)``): its ranks (global, tensor- and
pipeline-parallel), the dtypes its config says (model, KV cache, Mamba/SSM state caches),
the graph mode it runs, and what its loaded model holds
(:func:`abgate.engines.shared.rank_facts.module_facts`: weight dtypes, quantization per
module type, per-layer KV / conv / SSM state dtypes). vLLM sends a callable to its
workers only with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` in the engine's env: without
it ``ranks`` is absent and ``ranks_not_reported`` says why, so a contract's
``[every_rank]`` clause reads "not reported by this engine".
"""

from __future__ import annotations

from typing import Any

from abgate.engines.shared.rank_facts import module_facts

__all__ = ["rank_facts", "ranks_entry", "worker_facts"]

_CONFIG = (  # (fact, config section, attribute)
    ("model_dtype", "model_config", "dtype"),
    ("quantization", "model_config", "quantization"),
    ("enforce_eager", "model_config", "enforce_eager"),
    ("kv_cache_dtype", "cache_config", "cache_dtype"),
    ("mamba_cache_dtype", "cache_config", "mamba_cache_dtype"),
    ("mamba_ssm_cache_dtype", "cache_config", "mamba_ssm_cache_dtype"),
    ("cudagraph_mode", "compilation_config", "cudagraph_mode"),
    ("compilation_mode", "compilation_config", "mode"),
)


def _text(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    name = getattr(value, "name", None)  # an enum (CUDAGraphMode.FULL_AND_PIECEWISE)
    return name if isinstance(name, str) else str(value).removeprefix("torch.")


def _ranks(worker: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": _text(getattr(worker, "rank", None)),
                           "local_rank": _text(getattr(worker, "local_rank", None))}
    try:  # vLLM's process groups: only inside a real worker. vLLM 0.26 exports
        # get_tensor_model_parallel_rank but no pipeline twin; the group coordinators
        # (parallel_state.get_tp_group / get_pp_group) give both.
        from vllm.distributed.parallel_state import get_pp_group, get_tp_group

        out["tp_rank"] = int(get_tp_group().rank_in_group)
        out["pp_rank"] = int(get_pp_group().rank_in_group)
    except Exception:  # no vLLM here (a stand-in), or groups not initialised
        out["tp_rank"] = out["pp_rank"] = None
    return out


def worker_facts(worker: Any) -> dict[str, Any]:
    """On one worker: its ranks, configured dtypes, graph mode and model facts."""
    runner = getattr(worker, "model_runner", worker)
    cfg = getattr(worker, "vllm_config", None) or getattr(runner, "vllm_config", None)
    facts = _ranks(worker)
    for key, section, attr in _CONFIG:
        obj = getattr(cfg, section, None)
        if obj is not None and hasattr(obj, attr):
            facts[key] = _text(getattr(obj, attr))
    if "enforce_eager" in facts or "cudagraph_mode" in facts:
        facts["graph_mode"] = "eager" if facts.get("enforce_eager") else \
            str(facts.get("cudagraph_mode") or "cuda graphs")
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    facts.update(module_facts(model))
    return facts


def rank_facts(llm: Any) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(every worker's :func:`worker_facts`, in rank order; None and why when vLLM
    would not send the function to its workers)."""
    try:
        replies = llm.collective_rpc(worker_facts)
    except Exception as exc:  # without VLLM_ALLOW_INSECURE_SERIALIZATION=1, say
        return None, (f"collective_rpc refused ({type(exc).__name__}: {str(exc)[:160]}); "
                      "start the engine with VLLM_ALLOW_INSECURE_SERIALIZATION=1")
    return [dict(r) for r in replies], None


def ranks_entry(llm: Any) -> dict[str, Any]:
    """``{"ranks": [...]}`` for the effective config, or ``{"ranks_not_reported": why}``."""
    ranks, why = rank_facts(llm)
    return {"ranks": ranks} if ranks is not None else {"ranks_not_reported": why}
