"""Teacher-forced logits of a transformers engine, for ``score``: through ``generate``
(``score_mode=decode``: the very prefill and decode steps generation uses) or one
forward pass through a fresh cache (``score_mode=prefill``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abgate.engines.transformers.hooks import _Force
from abgate.engines.transformers.options import STATIC_CACHES


def decode_logits(torch: Any, tf: Any, model: Any, ids: Any, gcfg: Any,
                  cont: list[int]) -> Any:
    """``generate`` over the prompt ``ids`` under ``gcfg`` (``len(cont)`` new tokens,
    EOS ignored) with a logits processor that records each step's raw logits and forces
    the next continuation token: one row per continuation token."""
    prompt_len = int(ids.shape[-1])
    force = _Force(torch, prompt_len, cont)
    seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                         generation_config=gcfg,
                         logits_processor=tf.LogitsProcessorList([force]))
    if seq[0, prompt_len:].tolist() != cont or len(force.rows) != len(cont):
        raise RuntimeError("teacher forcing through generate() did not follow the "
                           "continuation")
    return torch.stack(force.rows).float().cpu().numpy()


def prefill_logits(torch: Any, model: Any, cache_kw: Mapping[str, Any], head: Any | None,
                   tail: Any) -> Any:
    """``head`` (the prompt but its last token; None when that is empty) prefilled into
    the cache of ``cache_kw``, then ``tail`` (``[prompt[-1], *continuation[:-1]]``)
    through it in one forward pass: its logits, one row per continuation token."""
    with torch.no_grad():
        if head is not None:
            model(input_ids=head, logits_to_keep=1, **cache_kw)
        out = model(input_ids=tail, **cache_kw)
        return out.logits[0].float().cpu().numpy()


def scoring_cache(tf: Any, model: Any, r: Mapping[str, Any], length: int) -> Any:
    """A fresh cache of ``r``'s cache_implementation for ``length`` tokens (a quantized
    cache scores through a dynamic one)."""
    cu = tf.cache_utils
    impl = r["cache_implementation"]
    config = model.config.get_text_config(decoder=True)
    if impl in STATIC_CACHES:
        size = max(length, int(r.get("max_cache_len") or 0))
        return cu.StaticCache(config=config, max_cache_len=size,
                              offloading=impl == "offloaded_static")
    if impl == "offloaded":
        return cu.DynamicCache(config=config, offloading=True)
    return cu.DynamicCache(config=config)
