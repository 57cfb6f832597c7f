"""Precision facts of one engine rank, read from its loaded torch model (duck-typed: no
torch import here): what a contract's ``[every_rank]`` clauses are checked against.

- ``weight_dtypes``: parameter tensors per dtype as held (``{"bfloat16": 30, ...}``);
- ``quantization_by_module``: module class -> the quantization method class vLLM gave it
  (``QKVParallelLinear: Fp8LinearMethod``); modules without one are left out;
- per-layer state as vLLM binds it to each layer's ``kv_cache`` (attention: one KV
  tensor; Mamba/SSM mixers: ``(conv_state, ssm_state)``): ``state_dtypes_by_layer``
  and, when every layer agrees, ``kv_cache_tensor_dtype``, ``conv_state_dtype``,
  ``ssm_state_dtype`` (``mixed: a, b`` when they differ). A model whose state is made
  per call (transformers' caches) reports none of these: a clause on them then says
  "not reported by this engine".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["module_facts", "uniform"]

_STATE_NAMES = ("conv_state", "ssm_state")


def _dtype(t: Any) -> str | None:
    dtype = getattr(t, "dtype", None)
    if dtype is None or getattr(t, "numel", lambda: 0)() == 0:
        return None  # vLLM's placeholder before the cache is bound: torch.tensor([])
    return str(dtype).removeprefix("torch.")


def uniform(values: Iterable[str]) -> str | None:
    """The one value of ``values``, ``mixed: a, b`` when they differ, None when empty."""
    found = sorted(set(values))
    if not found:
        return None
    return found[0] if len(found) == 1 else "mixed: " + ", ".join(found)


def _is_state_layer(module: Any) -> bool:
    """A Mamba-like layer (vLLM's ``MambaBase``: it declares its state's dtypes)."""
    return callable(getattr(module, "get_state_dtype", None))


def _layer_state(module: Any, cache: Any) -> dict[str, str]:
    """One layer's bound state: ``{"kv": dtype}`` or ``{"conv_state": .., "ssm_state": ..}``.

    vLLM 0.26 binds an attention layer's KV as one tensor and a Mamba-like layer's states
    as a list of tensors (``[conv_state, ssm_state]``); older versions wrap either in a
    list with one entry per virtual engine (``[kv]``, ``[(conv_state, ssm_state)]``).
    """
    if isinstance(cache, list | tuple) and cache and isinstance(cache[0], list | tuple):
        cache = cache[0]  # older vLLM: the first virtual engine's states
    elif isinstance(cache, list | tuple) and not _is_state_layer(module):
        cache = cache[0] if cache else None  # older vLLM: the first virtual engine's KV
    if isinstance(cache, list | tuple):  # a Mamba-like layer's states
        names = _STATE_NAMES if len(cache) == 2 else tuple(f"state{i}" for i in
                                                           range(len(cache)))
        return {n: d for n, t in zip(names, cache, strict=False) if (d := _dtype(t))}
    dtype = _dtype(cache)
    return {"kv": dtype} if dtype else {}


def module_facts(model: Any) -> dict[str, Any]:
    """The facts above for one rank's model (a ``torch.nn.Module``)."""
    weights = Counter(str(p.dtype).removeprefix("torch.") for _, p in model.named_parameters())
    quant: dict[str, set[str]] = {}
    states: dict[str, dict[str, str]] = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None:
            quant.setdefault(type(module).__name__, set()).add(type(method).__name__)
        cache = getattr(module, "kv_cache", None)
        if cache is not None and not callable(cache):
            state = _layer_state(module, cache)
            if state:
                states[name] = state
    out: dict[str, Any] = {
        "weight_dtypes": dict(sorted(weights.items())),
        "quantization_by_module": {k: uniform(v) for k, v in sorted(quant.items())},
    }
    if states:
        out["state_dtypes_by_layer"] = states
        for key, field in (("kv_cache_tensor_dtype", "kv"), ("conv_state_dtype", "conv_state"),
                           ("ssm_state_dtype", "ssm_state")):
            value = uniform(s[field] for s in states.values() if field in s)
            if value is not None:
                out[key] = value
    return out
