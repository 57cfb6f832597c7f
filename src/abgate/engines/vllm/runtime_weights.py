"""vLLM's weights as loaded, read from the worker through ``LLM.collective_rpc``.

The functions here run inside the worker (``collective_rpc`` pickles a callable and calls
it as ``fn(worker, *args)`` on every rank; vLLM's v1 engine sends a callable to its
EngineCore only with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` in the env it started with:
``--env VLLM_ALLOW_INSECURE_SERIALIZATION=1`` on the arm; abgate never sets it itself).
The model is ``worker.model_runner.model``; a weight quantized at load by
``quantization="fp8"`` is a float8 ``weight`` (held transposed, ``[in, out]``, by the
CUTLASS path) with a ``weight_scale`` (one per tensor, or per output channel): it is read
back as ``weight.float() * weight_scale`` in the ``[out, in]`` order of the bf16 arm.
vLLM's fused ``qkv_proj`` and ``gate_up_proj`` are split by the layer's
``output_sizes`` into the q/k/v and gate/up projections, so both arms name the same
seven projections per layer. Rank 0's shard is read (one GPU: the whole model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from abgate.engines.base import LoadedTensor
from abgate.errors import AbgateError

__all__ = ["as_array", "loaded_weights", "worker_read", "worker_table"]

_SPLITS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def _model(worker: Any) -> Any:
    runner = getattr(worker, "model_runner", worker)
    return runner.get_model() if hasattr(runner, "get_model") else runner.model


def _dequantized(module: Any, param: Any) -> Any:
    """``param`` (a module's ``weight``) as float32 ``[out, in]``, fp8 dequantized."""
    w = param.detach()
    scale = getattr(module, "weight_scale", None)
    if "float8" not in str(w.dtype) or scale is None:
        return w.float()
    w, s = w.float(), scale.detach().float()
    out_size = getattr(module, "output_size_per_partition", None)
    if out_size is not None and w.dim() == 2 and w.shape[0] != out_size \
            and w.shape[1] == out_size:
        w = w.t()  # the CUTLASS layout: [in, out]
    if s.numel() == 1:
        return w * s.reshape(())
    return w * s.reshape(-1, 1) if s.numel() == w.shape[0] else w * s.reshape(1, -1)


def _entries(model: Any) -> dict[str, tuple[Any, Any, slice | None]]:
    """name -> (module, parameter, row slice), fused projections split."""
    modules = dict(model.named_modules())
    out: dict[str, tuple[Any, Any, slice | None]] = {}
    for name, param in model.named_parameters():
        if name.endswith("weight_scale") or name.endswith("input_scale"):
            continue
        mod_name, _, leaf = name.rpartition(".")
        module = modules.get(mod_name)
        part = mod_name.rpartition(".")[2]
        sizes = getattr(module, "output_sizes", None)
        tp = int(getattr(module, "tp_size", 1) or 1)
        if part in _SPLITS and leaf == "weight" and sizes and len(sizes) == len(_SPLITS[part]):
            start = 0
            for new, size in zip(_SPLITS[part], sizes, strict=True):
                rows = int(size) // tp
                out[name.replace(part, new)] = (module, param, slice(start, start + rows))
                start += rows
            continue
        out[name] = (module, param, None)
    return out


def worker_table(worker: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """On the worker: name -> (dtype as held, logical shape)."""
    table = {}
    for name, (module, param, rows) in _entries(_model(worker)).items():
        shape = tuple(int(d) for d in _dequantized(module, param).shape) \
            if "float8" in str(param.dtype) else tuple(int(d) for d in param.shape)
        if rows is not None:
            shape = (rows.stop - rows.start, *shape[1:])
        table[name] = (str(param.dtype).removeprefix("torch."), shape)
    return table


def worker_read(worker: Any, name: str) -> tuple[bytes, tuple[int, ...]]:
    """On the worker: the tensor ``name`` as float32 bytes and shape (plain bytes cross
    vLLM's RPC serializer unchanged; an array read back with :func:`as_array`)."""
    module, param, rows = _entries(_model(worker))[name]
    w = _dequantized(module, param)
    array = (w if rows is None else w[rows]).contiguous().cpu().numpy()
    return array.tobytes(), tuple(int(d) for d in array.shape)


def as_array(reply: tuple[bytes, Sequence[int]]) -> Any:
    """A :func:`worker_read` reply as a float32 numpy array."""
    import numpy as np

    data, shape = reply
    return np.frombuffer(data, dtype=np.float32).reshape(tuple(shape))


def loaded_weights(llm: Any) -> dict[str, LoadedTensor]:
    """name -> :class:`LoadedTensor` of rank 0, each read by one ``collective_rpc``."""
    try:
        table = llm.collective_rpc(worker_table)[0]
    except Exception as exc:  # vLLM refuses to serialize a callable without the env
        raise AbgateError("vLLM could not send the weight reader to its workers "
                          f"({type(exc).__name__}: {str(exc)[:200]}); start the arm with "
                          "--env VLLM_ALLOW_INSECURE_SERIALIZATION=1") from None
    return {name: LoadedTensor(dtype, tuple(shape), _reader(llm, name))
            for name, (dtype, shape) in table.items()}


def _reader(llm: Any, name: str) -> Any:
    def read() -> Any:
        return as_array(llm.collective_rpc(worker_read, args=(name,))[0])
    return read
