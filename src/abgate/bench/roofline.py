"""The bandwidth roofline: how close a decode rate is to the memory-bandwidth limit.

Single-stream decode reads every weight once per token, so
``achieved GB/s = bytes read per token x steady decode tok/s`` and the ratio to the
machine's peak memory bandwidth says how much headroom is left.

Bytes per token (first-order; see docs/metrics.md):

- **weights**: every tensor in the GGUF file except the token-embedding table, of which
  a decode step reads one row. When the model has no separate ``output.weight`` the
  embedding table doubles as the output projection and is read in full, so it counts.
  MoE models read only their active experts; this figure overcounts them.
- An engine that declares ``weights_bytes_per_token`` in its effective config (the
  transformers engine: the tensors it holds, in the dtype it runs) is taken at its word.
- **KV cache**: per decoded token, K and V of every earlier position in every layer,
  taken at the mean context length of the decode.

Peak bandwidth is ``--peak-bw`` when declared, otherwise a short probe of the memory
the engine decodes from: for an engine on a GPU (vLLM, transformers on CUDA) a
device-to-device copy timed with CUDA events (read + write counted); for a CPU engine
numpy sums a large float64 array split over the process's cores, best of a few
repeats. Either is a probe estimate (a streaming lower bound on the vendor figure); a
GPU engine whose device cannot be probed gets no peak (and no fraction), never the
CPU's figure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from abgate.gguf_file import read_gguf
from abgate.records.bench_sections import ModelBytes, PeakBandwidth, Roofline
from abgate.records.sections import EngineRecord
from abgate.safejson import parse

# Bytes per element of KV-cache types (block formats: block bytes / 32 elements).
_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
             "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}


def _kv_per_position(meta: dict[str, Any], type_k: str, type_v: str) -> float | None:
    """K + V bytes of one position over all layers, from the GGUF hyperparameters."""
    arch = meta.get("general.architecture")
    layers = meta.get(f"{arch}.block_count")
    heads = meta.get(f"{arch}.attention.head_count")
    kv_heads: Any = meta.get(f"{arch}.attention.head_count_kv") or heads
    embd = meta.get(f"{arch}.embedding_length")
    bk, bv = _KV_BYTES.get(type_k), _KV_BYTES.get(type_v)
    if not isinstance(layers, int) or not heads or not isinstance(embd, int) or not bk or not bv:
        return None
    head_dim = embd // (heads if isinstance(heads, int) else max(heads))
    k_len = meta.get(f"{arch}.attention.key_length") or head_dim
    v_len = meta.get(f"{arch}.attention.value_length") or head_dim
    total_kv_heads = sum(kv_heads) if isinstance(kv_heads, list) else kv_heads * layers
    return float(total_kv_heads * (k_len * bk + v_len * bv))


def gguf_model_bytes(path: str | Path, type_k: str = "f16", type_v: str = "f16") -> ModelBytes:
    """Weights (and KV per position) read per decoded token, from a GGUF file's tensor
    table and hyperparameters."""
    header = read_gguf(path)
    sizes = {t.name: t.n_bytes for t in header.tensors}
    embd = sizes.get("token_embd.weight", 0)
    tied = "output.weight" not in sizes
    weights = sum(sizes.values()) - (0 if tied else embd)
    return ModelBytes(weights, "gguf tensors", embd, tied,
                      _kv_per_position(header.metadata, type_k, type_v))


def engine_model_bytes(eff: dict[str, Any]) -> ModelBytes | None:
    """The engine's own figures for the tensors it holds in memory, where it declares
    them (``weights_bytes_per_token`` in its effective config, e.g. the transformers
    engine, whose weights may be dequantized from a GGUF file to another dtype)."""
    w = eff.get("weights_bytes_per_token")
    if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
        return None
    kv = eff.get("kv_bytes_per_position")
    emb = eff.get("embedding_bytes")
    tied = eff.get("tied_embedding")
    source = str(eff.get("weights_bytes_source") or "engine (in-memory tensors)")
    return ModelBytes(w, source, emb if isinstance(emb, int) else None,
                      tied if isinstance(tied, bool) else None,
                      float(kv) if isinstance(kv, int | float) else None)


def model_bytes_for(describe: EngineRecord | None, declared: int | None = None) -> ModelBytes:
    """From the engine's ``describe()`` (None: not loaded): the engine's own in-memory
    figures when it declares them, else the GGUF figures when the model is a GGUF file;
    ``declared`` weights bytes when given (KV still from the engine or the file if
    readable)."""
    model = (describe.model if describe is not None else None) or ""
    eff = describe.effective_config if describe is not None else {}
    found = ModelBytes(None, "unknown")
    from_engine = engine_model_bytes(eff)
    if from_engine is not None:
        found = from_engine
    elif model and Path(model).is_file():
        with open(model, "rb") as f:
            is_gguf = f.read(4) == b"GGUF"
        found = (gguf_model_bytes(model, str(eff.get("type_k", "f16")),
                                  str(eff.get("type_v", "f16")))
                 if is_gguf else ModelBytes(Path(model).stat().st_size,
                                            "file size (upper bound)"))
    if declared is not None:
        return ModelBytes(declared, "declared", found.embedding_bytes, found.tied_embedding,
                          found.kv_bytes_per_position)
    return found


def measure_peak_bandwidth(size_mib: int = 512, repeats: int = 5,
                           threads: int | None = None) -> PeakBandwidth:
    """Best read bandwidth (GB/s, 1e9 bytes) of summing a ``size_mib`` float64 array,
    split over ``threads`` (default: the cores this process may use)."""
    threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                          else os.cpu_count() or 1)
    data = np.ones(size_mib * (1 << 20) // 8, dtype=np.float64)
    chunks = np.array_split(data, threads)
    best = 0.0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in range(repeats + 1):  # the first pass warms pages and threads
            t0 = time.perf_counter()
            list(pool.map(np.sum, chunks))
            best = max(best, data.nbytes / (time.perf_counter() - t0) / 1e9)
    return PeakBandwidth(gbps=best, source="probe estimate", method="numpy float64 sum",
                         size_mib=size_mib, threads=threads, repeats=repeats)


def measure_gpu_bandwidth(size_mib: int = 1024, repeats: int = 20) -> PeakBandwidth:
    """Device-to-device copy bandwidth of CUDA device 0 (GB/s, read + write counted),
    timed with CUDA events: the GPU's own probe estimate for engines that run there.
    ``{"gbps": None, "source": "unknown: <why>"}`` where no CUDA device can be used."""
    try:
        import torch

        if not torch.cuda.is_available():
            return PeakBandwidth(gbps=None,
                                 source="unknown: no CUDA device visible to this process")
        a = torch.empty(size_mib << 20, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        for _ in range(3):
            b.copy_(a)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3
        name = torch.cuda.get_device_name(0)
        del a, b
        torch.cuda.empty_cache()
    except Exception as exc:  # no torch, a driver error, out of memory, ...
        return PeakBandwidth(gbps=None, source=f"unknown: {type(exc).__name__}: {exc}"[:300])
    return PeakBandwidth(gbps=2 * (size_mib << 20) * repeats / seconds / 1e9,
                         source="probe estimate (GPU)", method="torch device-to-device copy",
                         device=name, size_mib=size_mib, repeats=repeats)


_PROBE_CHILD = ("import json; from abgate.bench.roofline import measure_gpu_bandwidth; "
                "print(json.dumps(measure_gpu_bandwidth().model_dump(mode='json')))")


def measure_gpu_bandwidth_in_child(timeout_s: float = 180.0) -> PeakBandwidth:
    """:func:`measure_gpu_bandwidth` in a child process, for an engine that is not in
    this one (a launched server): abgate's own process then never opens a CUDA context,
    which would hold GPU memory past the server's exit and fail its cleanup check
    (seen on an H200: 552 MB left in abgate's process, ``returned: false``)."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE_CHILD], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        got = parse(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return PeakBandwidth(gbps=None, source=f"unknown: the GPU probe's process failed: "
                                               f"{type(exc).__name__}: {exc}"[:300])
    try:
        found = PeakBandwidth.model_validate(got)  # the child's line: the model's JSON
    except ValidationError:
        return PeakBandwidth(gbps=None,
                             source="unknown: the GPU probe's process printed no figure")
    found.process = "a child process (abgate itself opens no CUDA context)"
    return found


def runs_on_gpu(describe: EngineRecord | None) -> bool:
    """Whether an engine's ``describe()`` says it runs on a GPU (vLLM; transformers on
    CUDA), so that its roofline needs the GPU's bandwidth, never the CPU's."""
    if describe is None:
        return False
    device = str(describe.effective_config.get("device") or "")
    return describe.name == "vllm" or device.startswith("cuda")


def roofline(mb: ModelBytes, decode_tps: float | None, mean_context: float | None,
             peak_gbps: float | None) -> Roofline:
    """Achieved GB/s at ``decode_tps`` and its fraction of ``peak_gbps``, for weights
    alone and for weights + KV cache."""
    kv = mb.kv_bytes_per_token(mean_context) if mean_context is not None else None
    w = mb.weights_bytes
    total = w + kv if w is not None and kv is not None else None

    def gbps(nbytes: float | None) -> float | None:
        return nbytes * decode_tps / 1e9 if nbytes is not None and decode_tps else None

    def frac(x: float | None) -> float | None:
        return x / peak_gbps if x is not None and peak_gbps else None

    achieved_w, achieved_t = gbps(w), gbps(total)
    return Roofline(weights_bytes_per_token=w, kv_bytes_per_token=kv,
                    bytes_per_token=total, decode_tps=decode_tps,
                    achieved_gbps_weights=achieved_w, achieved_gbps=achieved_t,
                    peak_gbps=peak_gbps, fraction_of_peak_weights=frac(achieved_w),
                    fraction_of_peak=frac(achieved_t))
