"""Loading a transformers engine: the libraries, the tokenizer, the model (from a
checkpoint, a GGUF file, or random weights with ``load_format=dummy``), the assistant
model, the EOS set and the neutralised generation config. Only the transformers
engine imports this module."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from abgate.engines.transformers.options import INSTALL_HINT, STATIC_CACHES, resolve_model
from abgate.errors import UsageError


def import_libraries() -> tuple[Any, Any]:
    """``(torch, transformers)``, typed as Any on purpose: the adapter is checked the same
    whether or not they are installed."""
    try:
        return importlib.import_module("torch"), importlib.import_module("transformers")
    except ImportError:
        raise UsageError(INSTALL_HINT) from None


class Source:
    """Where transformers reads a model from: a directory, or a GGUF file in one."""

    def __init__(self, model: str) -> None:
        path = Path(model)
        self.gguf = path.name if path.is_file() else None
        self.dir = str(path.parent if path.is_file() else path)

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"local_files_only": True}
        if self.gguf:
            kw["gguf_file"] = self.gguf
        return kw


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within this block, gguf-py's reader and tensor-name table are built once per file
    and architecture. transformers parses a GGUF file once for the config, again for the
    tokenizer and again for the weights, and rebuilds the name table for every submodule
    (397 times for SmolLM2-135M: 5.2 of the model's 16.7 s load on one core, measured
    2026-12-06). Both are only read; the originals are put back on exit. Loads are
    single-threaded, as everything that touches these module attributes is."""
    try:
        gguf: Any = importlib.import_module("gguf")
    except ImportError:  # no GGUF support installed: transformers says so if it is needed
        yield
        return
    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def one_reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = one_reader, functools.cache(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def uses_cuda(torch: Any, device: str, device_map: Any) -> bool:
    if not torch.cuda.is_available():
        return False
    if device_map is None:
        return bool(torch.device(device).type == "cuda")
    values = device_map.values() if isinstance(device_map, dict) else [device_map]
    return any(str(v) not in ("cpu", "disk", "meta") for v in values)


def start_cuda(torch: Any, device: Any) -> None:
    """The CUDA context and BLAS handles made before the "before load" memory reading."""
    torch.cuda.init()
    x = torch.ones(8, 8, device=device or "cuda")
    (x @ x).sum().item()
    del x
    torch.cuda.empty_cache()


def load_tokenizer(tf: Any, model: str) -> Any:
    src = Source(model)
    return tf.AutoTokenizer.from_pretrained(src.dir, **src.kwargs())


def _dtype(torch: Any, name: str) -> Any:
    return "auto" if name == "auto" else getattr(torch, name)


def load_model(torch: Any, tf: Any, model: str, r: Mapping[str, Any], device: Any) -> Any:
    """The model in eval mode, on ``device`` (or ``r``'s device_map), seeded by ``r``."""
    src = Source(model)
    attn = r.get("attn_implementation")
    kw: dict[str, Any] = {} if attn is None else {"attn_implementation": attn}
    torch.manual_seed(int(r["seed"]))
    if r["load_format"] == "dummy":
        config = tf.AutoConfig.from_pretrained(src.dir, **src.kwargs())
        dtype = _dtype(torch, r["dtype"])
        if dtype == "auto":
            dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) \
                or torch.float32
            dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if r.get("device_map") is not None:
            raise UsageError("load_format=dummy builds the model on one device: use "
                             "'device', not 'device_map'")
        with torch.device(device):
            m = tf.AutoModelForCausalLM.from_config(config, dtype=dtype, **kw)
    else:
        placement = r.get("device_map") if r.get("device_map") is not None else str(device)
        m = tf.AutoModelForCausalLM.from_pretrained(
            src.dir, dtype=_dtype(torch, r["dtype"]), device_map=placement, **kw,
            **src.kwargs())
    m.eval()
    return m


def load_assistant(tf: Any, r: Mapping[str, Any], main: Any, device: Any
                   ) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``r``'s assistant_model, beside ``main``; else Nones."""
    name = r.get("assistant_model")
    if not name:
        return None, None
    src = Source(resolve_model(name, what="assistant model"))
    tok = tf.AutoTokenizer.from_pretrained(src.dir, **src.kwargs())
    placement = str(device) if device is not None else main.device
    m = tf.AutoModelForCausalLM.from_pretrained(
        src.dir, dtype=main.dtype, device_map=placement, **src.kwargs())
    m.eval()
    n = r.get("num_assistant_tokens")
    if n is not None:
        m.generation_config.num_assistant_tokens = int(n)
        m.generation_config.num_assistant_tokens_schedule = "constant"
    return m, tok


def eos_ids(tokenizer: Any, model: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, model.generation_config.eos_token_id,
                   getattr(model.config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list | tuple):
            ids.update(int(i) for i in source)
    return frozenset(ids)


def neutral_generation_config(tf: Any, tokenizer: Any, eos: frozenset[int],
                              models: Sequence[Any]) -> Any:
    """The models' own sampling defaults (temperature, top_p, ...) would be merged into
    every request's config; abgate sends every knob itself, so they are cleared. The
    pad token ID used (the tokenizer's, else the lowest EOS)."""
    pad = tokenizer.pad_token_id
    if pad is None and eos:
        pad = min(eos)
    for m in models:
        if m is not None:
            old = m.generation_config
            m.generation_config = tf.GenerationConfig(
                pad_token_id=pad, bos_token_id=tokenizer.bos_token_id,
                num_assistant_tokens=getattr(old, "num_assistant_tokens", 20),
                num_assistant_tokens_schedule=getattr(old, "num_assistant_tokens_schedule",
                                                      "constant"))
    return pad


def check_compile(tf: Any, r: Mapping[str, Any], on_cuda: bool) -> None:
    if r.get("max_cache_len") is not None and \
            not hasattr(tf.GenerationConfig(), "max_cache_len"):
        raise UsageError(f"transformers {tf.__version__} has no max_cache_len in "
                         "GenerationConfig; drop the engine arg or upgrade transformers")
    if r.get("compile") is True and not (on_cuda and r["cache_implementation"] in STATIC_CACHES):
        raise UsageError("compile=true: transformers compiles the decode step only with a "
                         "static cache on CUDA (cache_implementation=static, a CUDA "
                         "device)")
