"""vLLM's worker-side weights reader (``engines/vllm/runtime_weights``) on a stand-in
worker: torch modules laid out as vLLM leaves them, no vLLM and no model loaded (it was
in the engine tier's tests/test_weights_runtime.py; it needs torch only, skipped
without it)."""

from __future__ import annotations

import numpy as np
import pytest


def test_vllm_worker_reader_dequantizes_fp8_and_splits_fused_projections() -> None:
    """A stand-in for vLLM's worker (vLLM cannot run here): torch modules laid out as
    vLLM's fp8 online quantization leaves them (float8 ``weight`` held ``[in, out]``, a
    per-tensor ``weight_scale``) and a bf16 fused ``qkv_proj`` with ``output_sizes``."""
    torch = pytest.importorskip("torch")
    from abgate.engines.vllm.runtime_weights import as_array, worker_read, worker_table

    w = torch.randn(8, 4)  # [out, in]
    scale = w.abs().max() / 448.0
    fp8 = torch.nn.Module()
    fp8.weight = torch.nn.Parameter((w / scale).to(torch.float8_e4m3fn).t(), requires_grad=False)
    fp8.weight_scale = torch.nn.Parameter(scale.reshape(1), requires_grad=False)
    fp8.output_size_per_partition = 8
    qkv = torch.nn.Module()
    qkv.weight = torch.nn.Parameter(torch.randn(6, 4).to(torch.bfloat16), requires_grad=False)
    qkv.output_sizes, qkv.tp_size = [4, 1, 1], 1
    layer = torch.nn.Module()
    layer.down_proj, layer.qkv_proj = fp8, qkv
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([layer])
    worker = type("W", (), {"model_runner": type("R", (), {"model": model})()})()
    table = worker_table(worker)
    assert table["layers.0.down_proj.weight"] == ("float8_e4m3fn", (8, 4))
    assert {k: v[1] for k, v in table.items() if "_proj.weight" in k and "down" not in k} == {
        "layers.0.q_proj.weight": (4, 4), "layers.0.k_proj.weight": (1, 4),
        "layers.0.v_proj.weight": (1, 4)}
    down = as_array(worker_read(worker, "layers.0.down_proj.weight"))
    rel = np.linalg.norm(down - w.numpy()) / np.linalg.norm(w.numpy())
    assert down.shape == (8, 4) and 0 < rel < 0.1  # fp8 e4m3: a few percent
    np.testing.assert_array_equal(as_array(worker_read(worker, "layers.0.k_proj.weight")),
                                  qkv.weight.float()[4:5].numpy())
