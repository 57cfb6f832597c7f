"""What the bandwidth roofline reads for a vLLM model: weight and KV-cache bytes per
decoded token, from the model's parameters.

vLLM holds the weights in its worker processes, so they are counted here from the
model's own configuration: transformers builds the architecture on PyTorch's ``meta``
device (shapes only, no memory, no weights read), which counts every parameter the
same way for real and for ``load_format=dummy`` weights. Bytes are taken at the dtype
vLLM runs (``model_config.dtype``); with ``quantization="fp8"`` (vLLM's dynamic FP8)
the decoder's linear weights count one byte per element, the embeddings, norms and
output head stay at the model dtype (vLLM does not quantize them). KV bytes per
position follow ``kv_cache_dtype`` (``fp8*``: one byte). The figure for tensor- or
pipeline-parallel runs is the whole model's (every GPU reads its shard per token).
"""

from __future__ import annotations

from typing import Any

_ONE_BYTE_WEIGHTS = frozenset({"fp8"})


def _elem_bytes(torch: Any, dtype: Any) -> int:
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""), None)
    return int(torch.empty((), dtype=dtype).element_size()) if dtype is not None else 2


def model_bytes(model_config: Any, kv_cache_dtype: str | None) -> dict[str, Any]:
    """``weights_bytes_per_token``, ``embedding_bytes``, ``tied_embedding``,
    ``kv_bytes_per_position``, ``parameter_count`` and how they were counted; or
    ``{"weights_bytes_source": "unknown: <why>"}`` when the architecture cannot be built."""
    try:
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(model_config.hf_config)
    except Exception as exc:  # an architecture transformers does not know, no torch, ...
        return {"weights_bytes_source": f"unknown: {type(exc).__name__}: {exc}"[:300]}
    elem = _elem_bytes(torch, getattr(model_config, "dtype", None))
    quant = getattr(model_config, "quantization", None)
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is None or head.weight is emb
    one_byte: set[int] = set()
    if quant in _ONE_BYTE_WEIGHTS:
        one_byte = {id(m.weight) for m in model.modules()
                    if isinstance(m, torch.nn.Linear) and m is not head}
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() * (1 if pid in one_byte else elem) for pid, p in params.items())
    emb_bytes = emb.numel() * elem
    return {
        "parameter_count": sum(p.numel() for p in params.values()),
        "weights_bytes_per_token": total - (0 if tied else emb_bytes),
        "embedding_bytes": emb_bytes, "tied_embedding": tied,
        "kv_bytes_per_position": _kv_bytes(model.config, elem, kv_cache_dtype),
        "weights_bytes_source": "parameters (meta-device count) at "
                                + (f"{quant} linear weights" if one_byte else f"{elem} B/param"),
    }


def _kv_bytes(config: Any, elem: int, kv_cache_dtype: str | None) -> int | None:
    text = config.get_text_config(decoder=True)
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or (text.hidden_size // heads if heads else None)
    layers = getattr(text, "num_hidden_layers", None)
    if not (layers and kv_heads and head_dim):
        return None
    kv_elem = 1 if str(kv_cache_dtype or "auto").startswith("fp8") else elem
    return int(2 * layers * kv_heads * head_dim * kv_elem)
