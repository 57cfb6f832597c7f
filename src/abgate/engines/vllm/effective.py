"""What a loaded vLLM engine runs with, read back after load: the effective
configuration's fields (:data:`_EFFECTIVE`), as JSON values (:func:`jsonable`: a dict or
list engine arg such as ``hf_overrides`` is a JSON object or array, never its Python
repr), and the digest of the model configuration vLLM built (``hf_config_sha256``)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any

_EFFECTIVE = (  # (record key, config section, attribute)
    ("dtype", "model_config", "dtype"),
    ("max_model_len", "model_config", "max_model_len"),
    ("quantization", "model_config", "quantization"),
    ("enforce_eager", "model_config", "enforce_eager"),
    ("seed", "model_config", "seed"),
    ("revision", "model_config", "revision"),
    ("kv_cache_dtype", "cache_config", "cache_dtype"),
    ("enable_prefix_caching", "cache_config", "enable_prefix_caching"),
    ("block_size", "cache_config", "block_size"),
    ("gpu_memory_utilization", "cache_config", "gpu_memory_utilization"),
    ("num_gpu_blocks", "cache_config", "num_gpu_blocks"),
    ("tensor_parallel_size", "parallel_config", "tensor_parallel_size"),
    ("pipeline_parallel_size", "parallel_config", "pipeline_parallel_size"),
    ("data_parallel_size", "parallel_config", "data_parallel_size"),
    ("distributed_executor_backend", "parallel_config", "distributed_executor_backend"),
    ("compilation_level", "compilation_config", "level"),
    ("compilation_mode", "compilation_config", "mode"),
    ("cudagraph_mode", "compilation_config", "cudagraph_mode"),
    ("compilation_backend", "compilation_config", "backend"),
    ("max_num_seqs", "scheduler_config", "max_num_seqs"),
    ("max_num_batched_tokens", "scheduler_config", "max_num_batched_tokens"),
    ("enable_chunked_prefill", "scheduler_config", "enable_chunked_prefill"),
    ("attention_backend", "attention_config", "backend"),
    ("flash_attn_version", "attention_config", "flash_attn_version"),
    ("load_format", "load_config", "load_format"),
    ("device", "device_config", "device_type"),
)


def jsonable(value: Any) -> Any:
    """A JSON value for a config field: enums by name (vLLM's ``CompilationMode`` is an
    ``IntEnum``, so this comes before the number check), other objects as text."""
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):  # hf_overrides, a compilation config: a JSON object
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [jsonable(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return str(value)  # torch.dtype and other objects


def effective_config(engine: Any) -> dict[str, Any]:
    """The configuration the engine actually runs with, read back after load."""
    cfg = getattr(engine, "vllm_config", None)
    out: dict[str, Any] = {}
    for key, section, attr in _EFFECTIVE:
        obj = getattr(cfg, section, None) or getattr(engine, section, None)
        if obj is not None and hasattr(obj, attr):
            out[key] = jsonable(getattr(obj, attr))
    eager = out.get("enforce_eager")
    out["graph_mode"] = "eager" if eager else (out.get("cudagraph_mode") or "cuda graphs")
    if "attention_backend" in out and out["attention_backend"] is None:
        out["attention_backend"] = "auto"  # chosen per layer in the worker (its log says which)
    if cfg is not None:
        spec = getattr(cfg, "speculative_config", None)
        out["speculative_config"] = None if spec is None else {
            k: jsonable(getattr(spec, k, None))
            for k in ("method", "num_speculative_tokens", "model")}
    model_config = getattr(cfg, "model_config", None) or getattr(engine, "model_config", None)
    hf_config = getattr(model_config, "hf_config", None)
    if hf_config is not None:
        out.update(hf_config_facts(hf_config))
    return out


def hf_config_facts(hf_config: Any) -> dict[str, Any]:
    """The model configuration vLLM built (``hf_overrides`` applied), as the SHA-256 of
    its canonical JSON: an override the model ignores leaves it as it was, one that
    takes effect changes it. None where the config cannot be read."""
    to_dict = getattr(hf_config, "to_dict", None)
    if to_dict is None:
        return {"hf_config_sha256": None}
    try:
        data = jsonable(to_dict())
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except Exception as exc:  # a config object that cannot be read back
        return {"hf_config_sha256": f"unknown: {type(exc).__name__}"}
    return {"hf_config_sha256": hashlib.sha256(text.encode()).hexdigest()}
