"""The ``GenerationConfig`` of one request: every sampling knob explicit (the model's
own ``generation_config`` sampling defaults never apply), EOS and stop strings left to
the adapter's own stopping criterion, and the arm's cache, compile and prompt-lookup
settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abgate.engines.base import SamplingParams


def generation_kwargs(p: SamplingParams) -> dict[str, Any]:
    """``GenerationConfig`` sampling fields: every knob explicit; EOS and stop strings
    are the adapter's own stopping criterion, so generate() knows no EOS."""
    kw: dict[str, Any] = {"max_new_tokens": p.max_tokens, "num_beams": 1,
                          "do_sample": not p.greedy, "repetition_penalty": 1.0,
                          "eos_token_id": None, "use_cache": True}
    if p.greedy:
        kw.update(temperature=None, top_p=None, top_k=None)
    else:
        kw.update(temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or None)
    return kw


def generation_config(tf: Any, requested: Mapping[str, Any], pad_token_id: Any,
                      p: SamplingParams) -> Any:
    """The ``transformers.GenerationConfig`` for sampling ``p`` under the engine args
    ``requested``."""
    r = requested
    kw = generation_kwargs(p)
    kw["pad_token_id"] = pad_token_id
    impl = r["cache_implementation"]
    if impl != "dynamic":
        kw["cache_implementation"] = impl
    if r.get("max_cache_len") is not None:
        kw["max_cache_len"] = int(r["max_cache_len"])
    if r.get("compile") is False:
        kw["disable_compile"] = True
    if r.get("compile_mode") is not None:
        kw["compile_config"] = tf.CompileConfig(mode=r["compile_mode"])
    if r.get("prompt_lookup_num_tokens"):
        kw["prompt_lookup_num_tokens"] = int(r["prompt_lookup_num_tokens"])
    return tf.GenerationConfig(**kw)
