"""vLLM's weights as loaded, read from the worker through ``LLM.collective_rpc``.

The functions here run inside the worker (``collective_rpc`` pickles a callable and calls
it as ``fn(worker, *args)`` on every rank; vLLM's v1 engine sends a callable to its
EngineCore only with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` in the env it started with:
``--env VLLM_ALLOW_INSECURE_SERIALIZATION=1`` on the arm; abgate never sets it itself).
The model is ``worker.model_runner.model``; a weight quantized at load by
``quantization="fp8"`` is a float8 ``weight`` held as a transposed view ``[in, out]``
with a ``weight_scale``: :mod:`abgate.engines.vllm.fp8_layout` reads it back as float32
``[out, in]`` (the layout from the strides, not the shape: square projections too).
vLLM's fused ``qkv_proj`` and ``gate_up_proj`` are split by the layer's
``output_sizes`` into the q/k/v and gate/up projections, so both arms name the same
seven projections per layer. Rank 0's shard is read (one GPU: the whole model).

Reading is batched: one ``collective_rpc`` returns the tensors that follow the one asked
for up to :data:`BATCH_BYTES` on the wire, bf16 tensors as their 2-byte bits (widened to
float32 on the client, exactly), so a Llama-3-8B-sized model takes tens of calls, not one
per tensor, and half the bytes of float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from abgate.engines.base import LoadedTensor
from abgate.engines.vllm.fp8_layout import dequantized, layout_hint, logical_shape
from abgate.errors import AbgateError

__all__ = ["BATCH_BYTES", "as_array", "loaded_weights", "worker_read", "worker_read_many",
           "worker_table"]

BATCH_BYTES = 512 << 20  # wire bytes per collective_rpc (one batch in the client at a time)

_SPLITS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def _model(worker: Any) -> Any:
    runner = getattr(worker, "model_runner", worker)
    return runner.get_model() if hasattr(runner, "get_model") else runner.model


Entry = tuple[Any, Any, slice | None]


def _entries(model: Any) -> tuple[dict[str, Entry], bool]:
    """name -> (module, parameter, row slice), fused projections split; and the fp8
    layout hint of the model (:func:`~abgate.engines.vllm.fp8_layout.layout_hint`)."""
    modules = dict(model.named_modules())
    out: dict[str, Entry] = {}
    for name, param in model.named_parameters():
        if name.endswith(("weight_scale", "input_scale", "weight_scale_inv")):
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
    return out, layout_hint(modules.values())


def worker_table(worker: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """On the worker: name -> (dtype as held, logical ``[out, in]`` shape)."""
    entries, hint = _entries(_model(worker))
    table = {}
    for name, (module, param, rows) in entries.items():
        shape = logical_shape(module, param, hint)
        if rows is not None:
            shape = (rows.stop - rows.start, *shape[1:])
        table[name] = (str(param.dtype).removeprefix("torch."), shape)
    return table


def _one(entry: Entry, hint: bool) -> tuple[bytes, tuple[int, ...], str]:
    module, param, rows = entry
    if "bfloat16" in str(param.dtype):  # sent as its bits: float32 is exact on the client
        import torch

        w = param.detach() if rows is None else param.detach()[rows]
        bits = w.contiguous().view(torch.int16).cpu().numpy()
        return bits.tobytes(), tuple(int(d) for d in bits.shape), "bfloat16"
    w = dequantized(module, param, hint)
    array = (w if rows is None else w[rows]).contiguous().cpu().numpy()
    return array.tobytes(), tuple(int(d) for d in array.shape), "float32"


def worker_read(worker: Any, name: str) -> tuple[bytes, tuple[int, ...]]:
    """On the worker: the tensor ``name`` as float32 bytes and shape (plain bytes cross
    vLLM's RPC serializer unchanged; an array read back with :func:`as_array`)."""
    entries, hint = _entries(_model(worker))
    module, param, rows = entries[name]
    w = dequantized(module, param, hint)
    array = (w if rows is None else w[rows]).contiguous().cpu().numpy()
    return array.tobytes(), tuple(int(d) for d in array.shape)


def worker_read_many(worker: Any, names: Sequence[str]
                     ) -> list[tuple[bytes, tuple[int, ...], str]]:
    """On the worker: each of ``names`` as (bytes, shape, ``float32`` or ``bfloat16``)."""
    entries, hint = _entries(_model(worker))
    return [_one(entries[name], hint) for name in names]


def as_array(reply: tuple[bytes, Sequence[int]] | tuple[bytes, Sequence[int], str]) -> Any:
    """A :func:`worker_read` / :func:`worker_read_many` reply as a float32 numpy array."""
    import numpy as np

    data, shape = reply[0], tuple(reply[1])
    if len(reply) == 3 and reply[2] == "bfloat16":
        bits = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype=np.float32).reshape(shape)


def loaded_weights(llm: Any, batch_bytes: int = BATCH_BYTES) -> dict[str, LoadedTensor]:
    """name -> :class:`LoadedTensor` of rank 0, read in batches of ``batch_bytes``."""
    try:
        table = llm.collective_rpc(worker_table)[0]
    except Exception as exc:  # vLLM refuses to serialize a callable without the env
        raise AbgateError("vLLM could not send the weight reader to its workers "
                          f"({type(exc).__name__}: {str(exc)[:200]}); start the arm with "
                          "--env VLLM_ALLOW_INSECURE_SERIALIZATION=1") from None
    batches = _Batches(llm, {n: _wire_bytes(d, s) for n, (d, s) in table.items()}, batch_bytes)
    return {name: LoadedTensor(dtype, tuple(shape), batches.reader(name))
            for name, (dtype, shape) in table.items()}


def _wire_bytes(dtype: str, shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n * (2 if dtype == "bfloat16" else 4)


class _Batches:
    """Reads tensors in table order, a batch per ``collective_rpc``: asking for one
    fetches it and those after it up to the byte budget; each is handed out once."""

    def __init__(self, llm: Any, sizes: dict[str, int], budget: int) -> None:
        self._llm, self._sizes, self._budget = llm, sizes, budget
        self._order = list(sizes)
        self._index = {name: i for i, name in enumerate(self._order)}
        self._ready: dict[str, Any] = {}
        self.calls = 0

    def reader(self, name: str) -> Any:
        def read() -> Any:
            if name not in self._ready:
                self._fetch(name)
            return self._ready.pop(name)
        return read

    def _fetch(self, name: str) -> None:
        self._ready.clear()  # out of order: drop what was read ahead
        names: list[str] = []
        total = 0
        for other in self._order[self._index[name]:]:
            size = self._sizes[other]
            if names and total + size > self._budget:
                break
            names.append(other)
            total += size
        replies = self._llm.collective_rpc(worker_read_many, args=(names,))[0]
        self.calls += 1
        self._ready = {n: as_array(r) for n, r in zip(names, replies, strict=True)}
