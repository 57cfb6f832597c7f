"""Cost per tensor of the runtime weights diff's steps, on this host's CPU (issue 37).

One Llama-3-8B ``gate_proj``-sized tensor (14336x4096, 58.7 M elements) held as vLLM
holds it in bf16 and after fp8 online quantization (``tests/test_vllm_fp8_layout.py``'s
layout): the worker-side read (bf16 bits; fp8 dequantized, on the CPU here, the GPU in a
real worker), the client's widening of the bf16 bits, and the statistics. Run from the
project root: ``PYTHONPATH=src:. python benchmarks/runtime_weights_cost.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from tests.test_vllm_fp8_layout import _linear

from abgate.engines.vllm import runtime_weights as rw
from abgate.weights.metrics import error_stats


def best(fn: Callable[[], Any], n: int = 2) -> tuple[float, Any]:
    out, times = None, []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    torch.set_num_threads(1)
    w = (torch.randn(14336, 4096) * 0.02).to(torch.bfloat16)
    fp8 = _linear(w)
    bf = torch.nn.Module()
    bf.weight = torch.nn.Parameter(w, requires_grad=False)
    t_bits, bits = best(lambda: rw._one((bf, bf.weight, None), False))
    t_fp8, deq = best(lambda: rw._one((fp8, fp8.weight, None), False))
    t_widen, a = best(lambda: rw.as_array(bits))
    b = rw.as_array(deq)
    t_stats, stats = best(lambda: error_stats(a, b))
    n = w.numel()
    print(f"{n / 1e6:.1f} M elements: worker bf16 bits {t_bits:.2f} s, worker fp8 dequant "
          f"{t_fp8:.2f} s, client widen {t_widen:.2f} s, stats {t_stats:.2f} s "
          f"({t_stats / n * 1e9:.1f} ns/element); rel L2 {stats.rel_l2:.4f}")
    per = (t_widen + t_stats) / n
    print(f"client side per element {per * 1e9:.1f} ns -> 8.03e9 parameters: {per * 8.03e9:.0f} s")


if __name__ == "__main__":
    main()
