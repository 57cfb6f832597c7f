"""What the ``transformers`` engine accepts, checked before anything loads: its engine
args (typed, with close-match errors and cross-checks) and the model (a local HF
directory, a GGUF file, or a hub id already in the local cache)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from abgate.engines.args import ArgSpec
from abgate.errors import UsageError
from abgate.schema import FORBID, TEXT, Bool, Int, Str, Style, checked, validated

NAME = "transformers"
INSTALL_HINT = ("the transformers engine needs torch and transformers: "
                "pip install 'abgate[transformers]'")
RANDOM_WEIGHTS_LABEL = "random weights: speed only"

DTYPES: Mapping[str, str] = {"auto": "auto", "float32": "float32", "fp32": "float32",
                             "float16": "float16", "fp16": "float16", "half": "float16",
                             "bfloat16": "bfloat16", "bf16": "bfloat16"}
Dtype = Literal["auto", "float32", "fp32", "float16", "fp16", "half", "bfloat16", "bf16"]
Attention = Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3",
                    "flex_attention"]
StaticCache = Literal["static", "offloaded_static"]
Cache = Literal["dynamic", "offloaded", "quantized", StaticCache]
CompileMode = Literal["default", "reduce-overhead", "max-autotune",
                      "max-autotune-no-cudagraphs"]
LoadFormat = Literal["auto", "dummy"]
ScoreMode = Literal["decode", "prefill"]
ATTENTION: tuple[str, ...] = typing.get_args(Attention)
STATIC_CACHES: tuple[str, ...] = typing.get_args(StaticCache)
CACHES: tuple[str, ...] = typing.get_args(Cache)
COMPILE_MODES: tuple[str, ...] = typing.get_args(CompileMode)
LOAD_FORMATS: tuple[str, ...] = typing.get_args(LoadFormat)
SCORE_MODES: tuple[str, ...] = typing.get_args(ScoreMode)
# In-process, the CUDA context outlives the engine: kernel images loaded (compiled graphs
# too) and library handles stay until the process exits, so NVML may read somewhat above
# the pre-load level; the torch allocator's own figure must be back exactly.
GPU_CONTEXT_TOLERANCE_BYTES = 512 << 20

_SPECS = [
    ArgSpec("dtype", str, "weights and activations dtype (auto: the checkpoint's)",
            choices=DTYPES),
    ArgSpec("attn_implementation", str, "attention kernels (null: transformers' default)",
            nullable=True, choices={a: a for a in ATTENTION}),
    ArgSpec("cache_implementation", str, "KV cache layout", choices={c: c for c in CACHES}),
    ArgSpec("max_cache_len", int, "static cache size in tokens (null: sized per request)",
            nullable=True),
    ArgSpec("compile", bool, "compile the decode step (null: transformers' rule, on for a "
            "static cache on CUDA; false: never; true: require it)", nullable=True),
    ArgSpec("compile_mode", str, "torch.compile mode of the decode step", nullable=True,
            choices={m: m for m in COMPILE_MODES}),
    ArgSpec("device", str, "torch device (null: cuda when available, else cpu)",
            nullable=True),
    ArgSpec("device_map", object, "accelerate device map (\"auto\", a device, or a JSON "
            "object); excludes device", nullable=True),
    ArgSpec("prompt_lookup_num_tokens", int, "prompt-lookup speculative decoding: "
            "draft tokens per step", nullable=True),
    ArgSpec("assistant_model", str, "draft model for speculative decoding (a model "
            "directory, GGUF file or cached hub id)", nullable=True),
    ArgSpec("num_assistant_tokens", int, "draft tokens per step with assistant_model",
            nullable=True),
    ArgSpec("seed", int, "seed for random weights (per-request seeds drive sampling)"),
    ArgSpec("deterministic", bool, "torch's deterministic algorithms for each request, and "
            "on CUDA cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8, set "
            "where unset before CUDA starts)"),
    ArgSpec("load_format", str, "auto: the checkpoint's weights; dummy: random weights "
            "from the model's config (speed only)", choices={f: f for f in LOAD_FORMATS}),
    ArgSpec("score_mode", str, "teacher-forced scoring: decode (through generate's own "
            "decode steps, the numerics it generates with) or prefill (one forward pass "
            "through the cache: faster, blind to a compiled decode step)",
            choices={m: m for m in SCORE_MODES}),
]
ARG_SPECS: Mapping[str, ArgSpec] = {s.name: s for s in _SPECS}

# -- checks that need no torch ------------------------------------------------------------


def _device_map(value: Any) -> str | None:
    if value is None or isinstance(value, str | dict):
        return None
    return "expects a string or a JSON object"


Count = Annotated[Int, Field(ge=1)]
ARGS = Style(noun="engine arg", must="expects")


@dataclass(frozen=True, config=FORBID)
class Args:
    """The engine args of this engine as a pydantic model (strict types, no unknown
    key): what :func:`check_args` validates, through the one error mapping
    (``abgate.schema``), before anything loads. Defaults are :data:`DEFAULTS`."""

    dtype: Annotated[Dtype, TEXT] = "auto"
    attn_implementation: Annotated[Attention, TEXT] | None = None
    cache_implementation: Annotated[Cache, TEXT] = "dynamic"
    max_cache_len: Count | None = None
    compile: Bool | None = None
    compile_mode: Annotated[CompileMode, TEXT] | None = None
    device: Str | None = None
    device_map: Annotated[Any, checked(_device_map)] = None
    prompt_lookup_num_tokens: Count | None = None
    assistant_model: Str | None = None
    num_assistant_tokens: Count | None = None
    seed: Int = 0
    deterministic: Bool = False
    load_format: Annotated[LoadFormat, TEXT] = "auto"
    score_mode: Annotated[ScoreMode, TEXT] = "decode"

    @classmethod
    def parse(cls, args: Mapping[str, Any]) -> Args:
        a = validated(cls, args, f"engine {NAME!r}", style=ARGS)
        a.check()
        return a

    def check(self) -> None:
        """Cross-argument rules."""
        if self.device is not None and self.device_map is not None:
            raise UsageError("engine args 'device' and 'device_map' exclude each other; "
                             "give one")
        if self.max_cache_len is not None and self.cache_implementation not in STATIC_CACHES:
            raise UsageError("engine arg 'max_cache_len' sizes a static cache: it needs "
                             f"cache_implementation={' or '.join(STATIC_CACHES)}")
        if self.compile_mode is not None and self.compile is False:
            raise UsageError("engine arg 'compile_mode' contradicts compile=false")
        if self.assistant_model and self.prompt_lookup_num_tokens:
            raise UsageError("engine args 'assistant_model' and 'prompt_lookup_num_tokens' "
                             "are two kinds of speculative decoding; give one")
        if self.num_assistant_tokens is not None and not self.assistant_model:
            raise UsageError("engine arg 'num_assistant_tokens' needs 'assistant_model'")
        if self.assistant_model:
            resolve_model(self.assistant_model, what="assistant model")


DEFAULTS: Mapping[str, Any] = {f.name: f.default for f in dataclasses.fields(Args)
                               if f.default is not None}


def check_args(args: Mapping[str, Any]) -> None:
    """Engine args (resolved by :data:`ARG_SPECS`, or given to :func:`load` as they are)
    checked by :class:`Args` before anything loads: types, ranges, cross-rules."""
    Args.parse(args)


def _is_gguf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"GGUF"


def resolve_model(model: str | None, what: str = "model") -> str:
    """A local model directory (with config.json), a GGUF file, or a hub id found in the
    local Hugging Face cache (its snapshot directory). Nothing is downloaded."""
    if model is None:
        from abgate.engines.shared.default_model import default_model_path

        return str(default_model_path().resolve())
    path = Path(model).expanduser()
    if path.is_file():
        if not _is_gguf(path):
            raise UsageError(f"{what} {path} is a file but not a GGUF file; give a GGUF file, "
                             "a model directory or a hub id")
        return str(path.resolve())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{what} directory {path} has no config.json")
        return str(path.resolve())
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise UsageError(f"{what} not found: {path}")
    return _cached_hub_snapshot(model, what)


def _cached_hub_snapshot(repo_id: str, what: str) -> str:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception as exc:  # an invalid repo id
        raise UsageError(f"{what} {repo_id!r} is neither a local path nor a valid hub id "
                         f"({exc})") from None
    if not isinstance(found, str):
        raise UsageError(f"{what} {repo_id!r} is not a local path and not in the local "
                         "Hugging Face cache; abgate loads with local_files_only=True, so "
                         f"download it first (hf download {repo_id}) or give a directory")
    return str(Path(found).parent.resolve())
