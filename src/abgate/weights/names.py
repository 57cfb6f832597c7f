"""Map tensor names from GGUF and Hugging Face checkpoints onto one vocabulary.

Two facts are read from a name: the transformer block it belongs to (``blk.12.``,
``model.layers.12.``, ``transformer.h.12.`` ...) and the role it plays, as one of
:data:`KINDS`. The same role gets the same kind whichever format names it, so
``blk.3.attn_q.weight`` and ``model.layers.3.self_attn.q_proj.weight`` both read
as layer 3, ``attn_q``.
"""

from __future__ import annotations

import re

__all__ = ["KINDS", "layer_index", "tensor_kind"]

KINDS = (
    "embeddings", "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output",
    "ffn_gate", "ffn_up", "ffn_gate_up", "ffn_down", "ffn_router", "norm", "output", "other",
)

_LAYER = re.compile(r"(?:^|\.)(?:blk|layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")

# One name component -> kind. GGUF names first, then Hugging Face / original ones.
_COMPONENT: dict[str, str] = {
    "token_embd": "embeddings", "embed_tokens": "embeddings", "wte": "embeddings",
    "wpe": "embeddings", "word_embeddings": "embeddings", "tok_embeddings": "embeddings",
    "position_embd": "embeddings", "position_embeddings": "embeddings",
    "embed_positions": "embeddings", "token_types": "embeddings",
    "attn_q": "attn_q", "q_proj": "attn_q", "wq": "attn_q", "query": "attn_q",
    "attn_k": "attn_k", "k_proj": "attn_k", "wk": "attn_k", "key": "attn_k",
    "attn_v": "attn_v", "v_proj": "attn_v", "wv": "attn_v", "value": "attn_v",
    "attn_qkv": "attn_qkv", "qkv_proj": "attn_qkv", "query_key_value": "attn_qkv",
    "c_attn": "attn_qkv", "wqkv": "attn_qkv",
    "attn_output": "attn_output", "o_proj": "attn_output", "out_proj": "attn_output",
    "wo": "attn_output",
    "ffn_gate": "ffn_gate", "gate_proj": "ffn_gate", "w1": "ffn_gate",
    "ffn_up": "ffn_up", "up_proj": "ffn_up", "w3": "ffn_up", "fc1": "ffn_up",
    "c_fc": "ffn_up", "dense_h_to_4h": "ffn_up",
    "gate_up_proj": "ffn_gate_up",
    "ffn_down": "ffn_down", "down_proj": "ffn_down", "w2": "ffn_down", "fc2": "ffn_down",
    "dense_4h_to_h": "ffn_down",
    "ffn_gate_inp": "ffn_router", "router": "ffn_router",
    "lm_head": "output", "embed_out": "output",
}

# Components whose role depends on the component before them.
_PAIR: dict[tuple[str, str], str] = {
    ("attn", "c_proj"): "attn_output", ("mlp", "c_proj"): "ffn_down",
    ("attention", "dense"): "attn_output", ("self_attention", "dense"): "attn_output",
    ("mlp", "gate"): "ffn_router", ("block_sparse_moe", "gate"): "ffn_router",
}

# GGUF suffixes for expert / shared-expert tensors (``ffn_up_exps``, ``ffn_down_shexp``).
_EXPERT_SUFFIX = re.compile(r"_(?:exps|shexp|chexps)$")
_NORM = re.compile(r"norm|^ln_(?:\d+|f)$|^layernorm")


def layer_index(name: str) -> int | None:
    """The block index in ``name``, or None for tensors outside the blocks."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def tensor_kind(name: str) -> str:
    """The role of the tensor called ``name``: one of :data:`KINDS`."""
    parts = [p.lower() for p in name.split(".")]
    if parts and parts[-1] in ("weight", "bias", "scale", "scales"):
        parts = parts[:-1]
    if not parts:
        return "other"
    if any(_NORM.search(p) for p in parts):
        return "norm"
    if parts == ["output"]:  # GGUF's top-level output projection
        return "output"
    for parent, part in zip(parts[-2::-1], parts[::-1], strict=False):
        kind = _PAIR.get((parent, part))
        if kind is not None:
            return kind
    for part in reversed(parts):
        kind = _COMPONENT.get(_EXPERT_SUFFIX.sub("", part))
        if kind is not None:
            return kind
    return "other"
