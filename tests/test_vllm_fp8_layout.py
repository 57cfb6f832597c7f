"""vLLM's fp8 weights read back as ``[out, in]`` float32 (issue 37, item 1: the fp8 bug).

vLLM cannot run here, so its layers are built with torch the way vLLM 0.26's
``Fp8LinearMethod.process_weights_after_loading`` leaves them: the online path
(``quantization="fp8"`` on a bf16 checkpoint) stores ``Parameter(qweight.t())`` (a
transposed view, ``[in, out]``) with one dynamic scale per tensor; per-channel
(``[out, 1]``) and per-shard scales, block-quantized ``[out, in]`` weights with
``weight_scale_inv``, and a contiguous ``[in, out]`` copy are read too. Square
projections are the case the first reader got wrong (it decided by shape): SmolLM2's
``o_proj`` read transposed gave the H200 run's relative L2 of 1.42.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from abgate.engines.vllm import runtime_weights as rw  # noqa: E402
from abgate.engines.vllm.fp8_layout import dequantized, held_in_out  # noqa: E402
from abgate.weights.runtime import diff_loaded  # noqa: E402

FP8_MAX = 448.0


class Fp8LinearMethod:  # the attributes abgate reads of vLLM's method of this name
    use_marlin = False
    block_quant = False


def _linear(w: Any, per_channel: bool = False, contiguous: bool = False,
            widths: list[int] | None = None) -> Any:
    """A linear layer after vLLM's fp8 online quantization of bf16 ``w`` ``[out, in]``."""
    src = w.float()
    amax = src.abs().amax(dim=1, keepdim=True) if per_channel else src.abs().max()
    scale = (amax / FP8_MAX).clamp(min=1e-12)
    q = (src / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    held = q.t().contiguous() if contiguous else q.t()  # vLLM: Parameter(qweight.t())
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(held, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(scale.reshape(-1, 1) if per_channel
                                            else scale.reshape(1), requires_grad=False)
    layer.output_size_per_partition, layer.input_size_per_partition = w.shape
    layer.logical_widths = widths or [w.shape[0]]
    layer.quant_method = Fp8LinearMethod()
    return layer


def _rel(a: Any, b: Any) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


@pytest.mark.parametrize("shape", [(64, 64), (32, 64), (96, 64)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_online_fp8_reads_back_as_the_bf16_source(shape: tuple[int, int],
                                                  per_channel: bool) -> None:
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    layer = _linear(w, per_channel)
    assert held_in_out(layer.weight, shape[0])  # the view's strides say [in, out]
    back = dequantized(layer, layer.weight)
    assert tuple(back.shape) == shape
    assert 0 < _rel(back, w.float()) < 0.06  # e4m3: a few percent, never ~sqrt(2)


def test_square_transposed_read_is_what_the_h200_figure_was() -> None:
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    back = dequantized(_linear(w), _linear(w).weight)
    assert _rel(back.t(), w.float()) > 1.2  # the wrong orientation: about sqrt(2)
    assert _rel(back, w.float()) < 0.06


def test_contiguous_square_takes_the_layout_of_its_non_square_siblings() -> None:
    gen = torch.Generator().manual_seed(3)
    square, tall = (torch.randn(*s, generator=gen).to(torch.bfloat16) for s in ((64, 64),
                                                                             (96, 64)))
    model = torch.nn.Module()
    model.o_proj, model.down_proj = _linear(square, contiguous=True), _linear(tall,
                                                                           contiguous=True)
    worker = type("W", (), {"model_runner": type("R", (), {"model": model})()})()
    table = rw.worker_table(worker)
    assert table["o_proj.weight"] == ("float8_e4m3fn", (64, 64))
    assert table["down_proj.weight"][1] == (96, 64)
    (o_reply,) = rw.worker_read_many(worker, ["o_proj.weight"])
    assert _rel(rw.as_array(o_reply), square.float()) < 0.06


def test_per_shard_and_block_scales() -> None:
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(48, 32, generator=gen).to(torch.bfloat16)
    layer = _linear(w, widths=[32, 8, 8])
    parts = [w[:32].float(), w[32:40].float(), w[40:].float()]
    scales = torch.stack([p.abs().max() / FP8_MAX for p in parts])
    q = torch.cat([(p / s).to(torch.float8_e4m3fn) for p, s in zip(parts, scales, strict=True)])
    layer.weight = torch.nn.Parameter(q.t(), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(scales, requires_grad=False)
    assert _rel(dequantized(layer, layer.weight), w.float()) < 0.06
    block = torch.nn.Module()  # block quant: [out, in] as loaded, one scale per 16x16 block
    s = w.float().reshape(3, 16, 2, 16).abs().amax(dim=(1, 3)) / FP8_MAX
    full = s.repeat_interleave(16, 0).repeat_interleave(16, 1)
    block.weight = torch.nn.Parameter((w.float() / full).to(torch.float8_e4m3fn),
                                      requires_grad=False)
    block.weight_scale_inv = torch.nn.Parameter(s, requires_grad=False)
    block.weight_block_size, block.output_size_per_partition = [16, 16], 48
    assert _rel(dequantized(block, block.weight), w.float()) < 0.06


def test_marlin_repacked_weight_is_refused() -> None:
    layer = _linear(torch.randn(8, 8).to(torch.bfloat16))
    layer.quant_method.use_marlin = True
    with pytest.raises(ValueError, match="Marlin"):
        dequantized(layer, layer.weight)


class _LLM:
    """Stand-in for ``vllm.LLM``: ``collective_rpc`` calls ``fn(worker, *args)`` on the
    one rank, as vLLM's does, and counts the calls."""

    def __init__(self, model: Any) -> None:
        self.worker = type("W", (), {"model_runner": type("R", (), {"model": model})()})()
        self.calls = 0

    def collective_rpc(self, fn: Any, args: tuple[Any, ...] = ()) -> list[Any]:
        self.calls += 1
        return [fn(self.worker, *args)]


def _smol_layers(n: int, hidden: int, kv: int, ffn: int, fp8: bool) -> Any:
    """A SmolLM2-shaped decoder stack as vLLM holds it (fused qkv and gate_up)."""
    gen = torch.Generator().manual_seed(5)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList()
    for _ in range(n):
        layer = torch.nn.Module()
        for name, (out, inp, sizes) in {"qkv_proj": (hidden + 2 * kv, hidden, [hidden, kv, kv]),
                                        "o_proj": (hidden, hidden, None),
                                        "gate_up_proj": (2 * ffn, hidden, [ffn, ffn]),
                                        "down_proj": (hidden, ffn, None)}.items():
            w = (torch.randn(out, inp, generator=gen) * 0.02).to(torch.bfloat16)
            mod = _linear(w) if fp8 else torch.nn.Module()
            if not fp8:
                mod.weight = torch.nn.Parameter(w, requires_grad=False)
            if sizes:
                mod.output_sizes, mod.tp_size = sizes, 1
            setattr(layer, name, mod)
        model.layers.append(layer)
    return model


def test_fp8_against_bf16_stand_ins_gives_fp8_error_in_every_cell() -> None:
    """Both arms through the client path (batched reads): every projection of every
    layer, the square o_proj included, within fp8's few percent; no outlier warning."""
    shape = dict(n=2, hidden=48, kv=16, ffn=128)
    bf16, fp8 = _LLM(_smol_layers(fp8=False, **shape)), _LLM(_smol_layers(fp8=True, **shape))
    ref, other = rw.loaded_weights(bf16), rw.loaded_weights(fp8, batch_bytes=64 << 10)
    assert ref["layers.0.q_proj.weight"].shape == other["layers.0.q_proj.weight"].shape
    doc = diff_loaded(ref, other, {"model": "smol"}, {"model": "smol"})
    rels = {t["name"]: t["rel_l2"] for t in doc["tensors"]}
    assert len(rels) == 2 * 7 and doc["summary"]["n_compared"] == 14
    assert all(0.005 < r < 0.06 for r in rels.values()), rels
    assert not any("relative L2 >=" in w for w in doc["warnings"])
    assert 2 < fp8.calls < 2 + 14  # one table call, then batches: fewer calls than tensors


def test_bf16_bits_cross_exactly_and_outliers_are_named() -> None:
    model = _smol_layers(n=1, hidden=32, kv=8, ffn=64, fp8=False)
    llm = _LLM(model)
    held = rw.loaded_weights(llm)
    np.testing.assert_array_equal(held["layers.0.o_proj.weight"].read(),
                                  model.layers[0].o_proj.weight.float().numpy())
    assert llm.calls == 2  # the table, then one batch holding all seven tensors
    swapped = dict(held)  # a square read transposed: what the table must show
    o = rw.loaded_weights(_LLM(model))["layers.0.o_proj.weight"]
    swapped["layers.0.o_proj.weight"] = type(o)(o.dtype, o.shape, lambda: o.read().T.copy())
    doc = diff_loaded(rw.loaded_weights(_LLM(model)), swapped, {}, {})
    (warning,) = [w for w in doc["warnings"] if "relative L2 >=" in w]
    assert "layers.0.o_proj.weight" in warning and "transposed" in warning
