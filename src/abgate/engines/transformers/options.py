"""What the ``transformers`` engine accepts, checked before anything loads: its engine
args (typed, with close-match errors and cross-checks) and the model (a local HF
directory, a GGUF file, or a hub id already in the local cache)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from abgate.engines.args import ArgSpec
from abgate.errors import UsageError

NAME = "transformers"
INSTALL_HINT = ("the transformers engine needs torch and transformers: "
                "pip install 'abgate[transformers]'")
RANDOM_WEIGHTS_LABEL = "random weights: speed only"

DTYPES: Mapping[str, str] = {"auto": "auto", "float32": "float32", "fp32": "float32",
                             "float16": "float16", "fp16": "float16", "half": "float16",
                             "bfloat16": "bfloat16", "bf16": "bfloat16"}
ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
STATIC_CACHES = ("static", "offloaded_static")
CACHES = ("dynamic", "offloaded", "quantized", *STATIC_CACHES)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
LOAD_FORMATS = ("auto", "dummy")
SCORE_MODES = ("decode", "prefill")
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
DEFAULTS: Mapping[str, Any] = {"dtype": "auto", "cache_implementation": "dynamic", "seed": 0,
                               "load_format": "auto", "score_mode": "decode",
                               "deterministic": False}


# -- checks that need no torch ------------------------------------------------------------


def check_args(args: Mapping[str, Any]) -> None:
    """Cross-argument checks on resolved engine args, before anything loads."""
    a = {**DEFAULTS, **args}
    if a.get("device") is not None and a.get("device_map") is not None:
        raise UsageError("engine args 'device' and 'device_map' exclude each other; "
                         "give one")
    dm = a.get("device_map")
    if dm is not None and not isinstance(dm, str | dict):
        raise UsageError(f"engine arg 'device_map' expects a string or a JSON object, "
                         f"got {dm!r}")
    for key in ("max_cache_len", "prompt_lookup_num_tokens", "num_assistant_tokens"):
        if a.get(key) is not None and a[key] < 1:
            raise UsageError(f"engine arg {key!r} must be >= 1, got {a[key]}")
    if a.get("max_cache_len") is not None and a["cache_implementation"] not in STATIC_CACHES:
        raise UsageError("engine arg 'max_cache_len' sizes a static cache: it needs "
                         f"cache_implementation={' or '.join(STATIC_CACHES)}")
    if a.get("compile_mode") is not None and a.get("compile") is False:
        raise UsageError("engine arg 'compile_mode' contradicts compile=false")
    if a.get("assistant_model") and a.get("prompt_lookup_num_tokens"):
        raise UsageError("engine args 'assistant_model' and 'prompt_lookup_num_tokens' are "
                         "two kinds of speculative decoding; give one")
    if a.get("num_assistant_tokens") is not None and not a.get("assistant_model"):
        raise UsageError("engine arg 'num_assistant_tokens' needs 'assistant_model'")
    if a.get("assistant_model"):
        resolve_model(a["assistant_model"], what="assistant model")


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
