"""How vLLM holds a quantized linear weight after load, read back as float32 ``[out, in]``
(worker side: torch tensors in, a torch tensor out).

vLLM 0.26's ``Fp8LinearMethod.process_weights_after_loading`` on a bf16 checkpoint with
``quantization="fp8"`` (online) quantizes with ``ops.scaled_fp8_quant(layer.weight,
scale=None)`` (one dynamic scale per tensor) and stores ``Parameter(qweight.t())``: a
transposed *view* of the row-major ``[out, in]`` result, shape ``[in, out]``, strides
``(1, in)``. An fp8-serialized checkpoint ends the same way (per-shard scales requantized
to their max, then ``.t()``). The shape alone cannot tell that layout from ``[out, in]``
when ``out == in`` (SmolLM2's ``o_proj`` 576x576; Llama-3-8B's ``q_proj``/``o_proj``
4096x4096): a reader that decided by shape read those square projections transposed
(relative L2 about sqrt(2), the 1.42 of the first H200 run). The layout is decided here,
in order, by

1. the strides: a column-major 2-D tensor (``stride == (1, rows)``) is a transposed view;
2. a row-major tensor that is not square: its shape against ``output_size_per_partition``;
3. a row-major square one: the layout the model's row-major non-square fp8 weights have
   (``hint``; none: ``[out, in]``).

Scales: one per tensor, one per output channel (``[out]`` or ``[out, 1]``), one per fused
shard (``logical_widths``), or one per block (``weight_scale_inv`` with the layer's
``weight_block_size``, weight ``[out, in]``). A Marlin-repacked weight (GPUs without fp8
support) is refused: its packing is not a matrix.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dequantized", "held_in_out", "is_fp8", "layout_hint", "logical_shape"]


def is_fp8(param: Any) -> bool:
    return "float8" in str(param.dtype)


def held_in_out(w: Any, out_size: int | None, hint: bool = False) -> bool:
    """True when the 2-D ``w`` is held ``[in, out]`` (see the module doc for the rule)."""
    if w.dim() != 2:
        return False
    rows, cols = int(w.shape[0]), int(w.shape[1])
    if rows > 1 and cols > 1 and w.stride(0) == 1 and w.stride(1) == rows:
        return True  # a transposed view of a row-major [out, in]
    if out_size is not None and rows != cols:
        return cols == out_size and rows != out_size
    return hint and rows == cols


def layout_hint(modules: Any) -> bool:
    """Whether the row-major, non-square fp8 weights among ``modules`` are held
    ``[in, out]`` (the rule 3 hint for row-major square ones)."""
    for module in modules:
        w = getattr(module, "weight", None)
        out = getattr(module, "output_size_per_partition", None)
        if w is None or out is None or not is_fp8(w) or w.dim() != 2:
            continue
        if w.is_contiguous() and w.shape[0] != w.shape[1]:
            return held_in_out(w, int(out))
    return False


def logical_shape(module: Any, param: Any, hint: bool = False) -> tuple[int, ...]:
    """The ``[out, in]`` shape of ``param`` as :func:`dequantized` returns it."""
    shape = tuple(int(d) for d in param.shape)
    if is_fp8(param) and held_in_out(param, _out_size(module), hint):
        return shape[::-1]
    return shape


def dequantized(module: Any, param: Any, hint: bool = False) -> Any:
    """``param`` (a module's ``weight``) as float32 ``[out, in]``, fp8 dequantized."""
    w = param.detach()
    if not is_fp8(w):
        return w.float()
    method = getattr(module, "quant_method", None)
    if getattr(method, "use_marlin", False):
        raise ValueError(f"{type(method).__name__} repacked this fp8 weight for Marlin; "
                         "its layout is not a matrix abgate can read")
    if held_in_out(w, _out_size(module), hint):
        w = w.t()
    w = w.float()
    block = getattr(module, "weight_block_size", None)
    block_scale = getattr(module, "weight_scale_inv", None)
    if block and block_scale is not None:
        return w * _block_scale(block_scale.detach().float(), block, w.shape)
    scale = getattr(module, "weight_scale", None)
    if scale is None:
        raise ValueError("an fp8 weight without weight_scale or weight_scale_inv")
    return w * _row_scale(scale.detach().float(), module, int(w.shape[0]))


def _out_size(module: Any) -> int | None:
    out = getattr(module, "output_size_per_partition", None)
    return None if out is None else int(out)


def _row_scale(s: Any, module: Any, rows: int) -> Any:
    """A scale broadcastable over ``[out, in]``: per tensor, channel or fused shard."""
    if s.numel() == 1:
        return s.reshape(())
    if s.numel() == rows:
        return s.reshape(-1, 1)
    widths = [int(x) for x in getattr(module, "logical_widths", None) or ()]
    if len(widths) == s.numel() and sum(widths) == rows:
        import torch

        return torch.repeat_interleave(s.reshape(-1), torch.tensor(widths, device=s.device)
                                       ).reshape(-1, 1)
    raise ValueError(f"weight_scale of {s.numel()} values fits neither one per tensor, "
                     f"per output channel ({rows}) nor per shard ({widths})")


def _block_scale(s: Any, block: Any, shape: Any) -> Any:
    bn, bk = int(block[0]), int(block[1])
    rows, cols = int(shape[0]), int(shape[1])
    return s.repeat_interleave(bn, dim=0)[:rows].repeat_interleave(bk, dim=1)[:, :cols]
