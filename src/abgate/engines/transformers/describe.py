"""Facts the ``transformers`` engine's ``describe()`` reports about the loaded weights and
the device: what the bandwidth roofline reads (weight and KV bytes per token) and where
the model runs."""

from __future__ import annotations

from typing import Any

from abgate.engines.shared.rank_facts import module_facts


def weight_facts(torch: Any, m: Any) -> dict[str, Any]:
    """Parameter count, weight bytes (tied embeddings counted once), the bytes read per
    decoded token (bench/roofline.model_bytes_for) and KV-cache bytes per position."""
    params = {id(p): p for p in m.parameters()}.values()
    weight_bytes = sum(p.numel() * p.element_size() for p in params)
    emb = m.get_input_embeddings().weight
    out_layer = m.get_output_embeddings()
    tied = out_layer is None or out_layer.weight.data_ptr() == emb.data_ptr()
    emb_bytes = emb.numel() * emb.element_size()
    text = m.config.get_text_config(decoder=True)
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or (text.hidden_size // heads if heads else None)
    layers = getattr(text, "num_hidden_layers", None)
    elem = torch.empty((), dtype=m.dtype).element_size()
    return {
        "parameter_count": sum(p.numel() for p in params),
        "weight_bytes": weight_bytes,
        "embedding_bytes": emb_bytes,
        "tied_embedding": tied,
        "weights_bytes_per_token": weight_bytes - (0 if tied else emb_bytes),
        "kv_bytes_per_position": (2 * layers * kv_heads * head_dim * elem
                                  if layers and kv_heads and head_dim else None),
        "n_vocab": int(emb.shape[0]),
        "ranks": [{"rank": 0, **module_facts(m)}],  # one process: rank 0 (no worker RPC)
    }


def device_facts(torch: Any, device: str, on_cuda: bool, explicit: bool) -> dict[str, Any]:
    """The device, its name and (on CUDA) compute capability."""
    if on_cuda:
        index = torch.device(device).index if explicit else None
        props = torch.cuda.get_device_properties(index or 0)
        name, capability = props.name, f"{props.major}.{props.minor}"
    else:
        from abgate.host import cpu_model

        name, capability = cpu_model(), None
    return {"device": device, "device_name": name, "device_capability": capability}
