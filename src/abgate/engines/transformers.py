"""Hugging Face transformers in-process (engine ``transformers``;
``pip install 'abgate[transformers]'``).

The model is a local model directory, a GGUF file (transformers dequantizes it to the
requested dtype through ``from_pretrained(dir, gguf_file=name)``) or a hub id that is
already in the local Hugging Face cache (everything loads with ``local_files_only=True``:
abgate never downloads). ``load_format=dummy`` builds the model from its config with
random weights (seeded), like vLLM's ``--load-format dummy``: such an engine describes
itself as "random weights: speed only", and the A/B analysis skips quality gates for it.

Requests go through ``model.generate`` one at a time with every sampling knob explicit
(the model's own ``generation_config`` sampling defaults are neutralised at load). Three
hooks ride along, all public ``generate`` APIs:

- a streamer: its first ``put`` (the prompt) marks the start of the request, and each
  later one hands over the accepted tokens the moment they reach the host, each
  timestamped with ``perf_counter`` then;
- a stopping criterion that decides EOS / stop strings / max tokens itself from the
  sequence (generate() is given no EOS, so ``ignore_eos`` is exact, and the output never
  holds the EOS token);
- a logits processor (an identity) that marks the moment the forward pass that
  produced the logits has finished.

On CUDA the marks are CUDA events; on the CPU (where a forward pass is synchronous)
they are ``perf_counter`` readings. ``engine_timings`` uses llama.cpp's names:
``prompt_eval_ms`` is the start mark to the first forward's end (the prefill),
``eval_ms`` sums, over the N - 1 decode steps that produced kept tokens, the time from
the previous token reaching the host to the end of the next forward (input preparation
plus the forward pass). What is left between a forward's end and the token on the host
(logits processing, sampling, stopping checks, the device-to-host copy) is what
``abgate bench`` reports as per-token overhead. Speculative decoding (``assistant_model``,
``prompt_lookup_num_tokens``) verifies several tokens per forward: it reports no
``engine_timings``.

``score`` gives full-vocabulary teacher-forced log-probs. By default
(``score_mode=decode``) it runs ``generate`` with a logits processor that records each
step's logits and forces the continuation's next token, so the rows come from the very
prefill and decode steps generation uses (a static cache's compiled decode step
included); ``score_mode=prefill`` scores the continuation in one forward pass through a
fresh cache of the arm's ``cache_implementation`` (faster, but blind to what only the
decode step does: measured on an H200, a compiled static-cache decode step changed 74
of 100 greedy GSM8K outputs while prefill-mode scoring read a KL divergence of exactly
0, docs/gpu.md). Only this module imports torch and transformers, and only when the engine
is used.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.engines import server_cleanup as srv
from abgate.engines.args import ArgSpec
from abgate.engines.base import (
    Capabilities,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    Message,
    OnResult,
    SamplingParams,
    TokenScores,
)
from abgate.engines.llamacpp import scores_from_logits
from abgate.errors import AbgateError, UsageError

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
    ArgSpec("load_format", str, "auto: the checkpoint's weights; dummy: random weights "
            "from the model's config (speed only)", choices={f: f for f in LOAD_FORMATS}),
    ArgSpec("score_mode", str, "teacher-forced scoring: decode (through generate's own "
            "decode steps, the numerics it generates with) or prefill (one forward pass "
            "through the cache: faster, blind to a compiled decode step)",
            choices={m: m for m in SCORE_MODES}),
]
ARG_SPECS: Mapping[str, ArgSpec] = {s.name: s for s in _SPECS}
DEFAULTS: Mapping[str, Any] = {"dtype": "auto", "cache_implementation": "dynamic", "seed": 0,
                               "load_format": "auto", "score_mode": "decode"}


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
        from abgate.engines.llamacpp import default_model_path

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


def import_libraries() -> tuple[Any, Any]:
    """``(torch, transformers)``, typed as Any on purpose: the adapter is checked the same
    whether or not they are installed."""
    try:
        return importlib.import_module("torch"), importlib.import_module("transformers")
    except ImportError:
        raise UsageError(INSTALL_HINT) from None


def load(model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
         run_dir: Path | None = None) -> TransformersEngine:
    if options:
        raise UsageError("the transformers engine takes no engine options "
                         f"(got {', '.join(options)})")
    return TransformersEngine(model, args)


def generation_kwargs(p: SamplingParams) -> dict[str, Any]:
    """``GenerationConfig`` sampling fields: every knob explicit; EOS and stop strings
    are the adapter's own stopping criterion, so generate() knows no EOS."""
    kw: dict[str, Any] = {"max_new_tokens": p.max_tokens, "num_beams": 1,
                          "do_sample": not p.greedy, "repetition_penalty": 1.0,
                          "eos_token_id": None, "use_cache": True}
    if p.greedy:
        kw.update(temperature=None, top_p=None, top_k=None)
    else:
        kw.update(temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or None)
    return kw


# -- the engine ---------------------------------------------------------------------------


class _Source:
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


class TransformersEngine:
    """A transformers causal LM, resident in this process."""

    capabilities = Capabilities(token_ids=True, logprobs=False, streaming=True,
                                chat_template=True, concurrent=False, engine_timings=True,
                                scoring="full")

    def __init__(self, model: str, args: Mapping[str, Any]) -> None:
        check_args(args)
        torch, self._tf = import_libraries()
        self._torch = torch
        self.model_path = model
        self.requested = {**DEFAULTS, **args}
        self.cleanup_evidence: dict[str, Any] | None = None
        r = self.requested
        self._dummy = r["load_format"] == "dummy"
        self._speculative = bool(r.get("assistant_model") or r.get("prompt_lookup_num_tokens"))
        device = r.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        self._device = torch.device(device) if r.get("device_map") is None else None
        self._on_cuda = self._uses_cuda(device)
        if self._on_cuda:
            torch.cuda.init()  # context and BLAS handles exist before the "before" reading
            x = torch.ones(8, 8, device=self._device or "cuda")
            (x @ x).sum().item()
            del x
            torch.cuda.empty_cache()
        self._gpu_before = srv.gpu_memory() if self._on_cuda else {
            "available": False, "reason": f"the engine runs on {device}"}
        self._allocated_before = int(torch.cuda.memory_allocated()) if self._on_cuda else 0
        t0 = time.perf_counter()
        try:
            self._tokenizer = self._load_tokenizer(model)
            self._model = self._load_model(model)
            self._assistant, self._assistant_tok = self._load_assistant()
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AbgateError(f"transformers could not load {model}: {first}") from None
        self.load_seconds = time.perf_counter() - t0
        self._eos = self._eos_ids()
        self._neutral_generation_config()
        self._cache_kw = ("cache" if "cache" in inspect.signature(self._model.forward).parameters
                          else "past_key_values")
        if not self._tokenizer.chat_template:
            self.capabilities = Capabilities(**{**vars(type(self).capabilities),
                                                "chat_template": False})
        if self._speculative:
            self.capabilities = Capabilities(**{**vars(self.capabilities),
                                                "engine_timings": False})
        self._check_compile()
        self._info = self._effective_config()

    # -- loading --------------------------------------------------------------------------

    def _uses_cuda(self, device: str) -> bool:
        torch = self._torch
        if not torch.cuda.is_available():
            return False
        dm = self.requested.get("device_map")
        if dm is None:
            return bool(torch.device(device).type == "cuda")
        values = dm.values() if isinstance(dm, dict) else [dm]
        return any(str(v) not in ("cpu", "disk", "meta") for v in values)

    def _dtype(self) -> Any:
        name = self.requested["dtype"]
        return "auto" if name == "auto" else getattr(self._torch, name)

    def _load_tokenizer(self, model: str) -> Any:
        src = _Source(model)
        return self._tf.AutoTokenizer.from_pretrained(src.dir, **src.kwargs())

    def _load_model(self, model: str) -> Any:
        tf, torch, r = self._tf, self._torch, self.requested
        src = _Source(model)
        attn = r.get("attn_implementation")
        kw: dict[str, Any] = {} if attn is None else {"attn_implementation": attn}
        torch.manual_seed(int(r["seed"]))
        if self._dummy:
            config = tf.AutoConfig.from_pretrained(src.dir, **src.kwargs())
            dtype = self._dtype()
            if dtype == "auto":
                dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) \
                    or torch.float32
                dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
            if r.get("device_map") is not None:
                raise UsageError("load_format=dummy builds the model on one device: use "
                                 "'device', not 'device_map'")
            with torch.device(self._device):
                m = tf.AutoModelForCausalLM.from_config(config, dtype=dtype, **kw)
        else:
            placement = r.get("device_map") if r.get("device_map") is not None else \
                str(self._device)
            m = tf.AutoModelForCausalLM.from_pretrained(
                src.dir, dtype=self._dtype(), device_map=placement, **kw, **src.kwargs())
        m.eval()
        return m

    def _load_assistant(self) -> tuple[Any, Any]:
        name = self.requested.get("assistant_model")
        if not name:
            return None, None
        path = resolve_model(name, what="assistant model")
        src = _Source(path)
        tok = self._tf.AutoTokenizer.from_pretrained(src.dir, **src.kwargs())
        placement = str(self._device) if self._device is not None else self._model.device
        m = self._tf.AutoModelForCausalLM.from_pretrained(
            src.dir, dtype=self._model.dtype, device_map=placement, **src.kwargs())
        m.eval()
        n = self.requested.get("num_assistant_tokens")
        if n is not None:
            m.generation_config.num_assistant_tokens = int(n)
            m.generation_config.num_assistant_tokens_schedule = "constant"
        return m, tok

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (self._tokenizer.eos_token_id, self._model.generation_config.eos_token_id,
                       getattr(self._model.config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif isinstance(source, list | tuple):
                ids.update(int(i) for i in source)
        return frozenset(ids)

    def _neutral_generation_config(self) -> None:
        """The model's own sampling defaults (temperature, top_p, ...) would be merged into
        every request's config; abgate sends every knob itself, so they are cleared."""
        pad = self._tokenizer.pad_token_id
        if pad is None and self._eos:
            pad = min(self._eos)
        for m in (self._model, self._assistant):
            if m is not None:
                old = m.generation_config
                m.generation_config = self._tf.GenerationConfig(
                    pad_token_id=pad, bos_token_id=self._tokenizer.bos_token_id,
                    num_assistant_tokens=getattr(old, "num_assistant_tokens", 20),
                    num_assistant_tokens_schedule=getattr(old, "num_assistant_tokens_schedule",
                                                          "constant"))
        self._pad = pad

    def _check_compile(self) -> None:
        r = self.requested
        if r.get("max_cache_len") is not None and \
                not hasattr(self._tf.GenerationConfig(), "max_cache_len"):
            raise UsageError(f"transformers {self._tf.__version__} has no max_cache_len in "
                             "GenerationConfig; drop the engine arg or upgrade transformers")
        if r.get("compile") is True and not (self._on_cuda and
                                             r["cache_implementation"] in STATIC_CACHES):
            raise UsageError("compile=true: transformers compiles the decode step only with a "
                             "static cache on CUDA (cache_implementation=static, a CUDA "
                             "device)")

    # -- the protocol ---------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return [int(i) for i in self._tokenizer(text, add_special_tokens=False)["input_ids"]]

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        if not self._tokenizer.chat_template:
            raise AbgateError(f"{self.model_path} has no chat template")
        text = self._tokenizer.apply_chat_template([dict(m) for m in messages],
                                                   add_generation_prompt=True, tokenize=False)
        return [int(i) for i in self._tokenizer(text, add_special_tokens=False)["input_ids"]]

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        results = []
        for r in requests:
            results.append(self._generate_one(r))
            if on_result is not None:
                on_result(results[-1])
        return results

    def describe(self) -> EngineInfo:
        return EngineInfo(name=NAME, version=str(self._tf.__version__), model=self.model_path,
                          effective_config=dict(self._info), capabilities=self.capabilities)

    def processes(self) -> list[int]:
        return [os.getpid()]

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        """Full-vocabulary teacher-forced log-probs (see :class:`TokenScores`).

        ``score_mode=decode`` (the default): ``generate`` runs over the prompt with a
        logits processor that records each step's raw logits and forces the next
        continuation token, so every row comes from the same prefill and decode steps
        (cache, compiled graph, kernels) that generation uses, and costs about as much
        as generating the continuation. ``score_mode=prefill``: the prompt but its last
        token is prefilled into a fresh cache of this engine's cache implementation, then
        ``[prompt[-1], *continuation[:-1]]`` goes through that cache in one forward pass
        (fast, but a compiled decode step's numerics do not show). Speculative engines
        score in prefill mode."""
        prompt, cont = [int(t) for t in prompt_token_ids], [int(t) for t in continuation]
        if not prompt or not cont:
            raise ValueError("scoring needs a non-empty prompt and continuation")
        if len(prompt) + len(cont) > self._max_len():
            raise ValueError(f"prompt + continuation ({len(prompt) + len(cont)} tokens) "
                             f"exceeds the context (max_position_embeddings="
                             f"{self._max_len()})")
        if self._score_mode() == "decode":
            logits = self._decode_logits(prompt, cont)
        else:
            logits = self._prefill_logits(prompt, cont)
        return scores_from_logits(logits, cont, top_k)

    def _score_mode(self) -> str:
        return "prefill" if self._speculative else str(self.requested["score_mode"])

    def _decode_logits(self, prompt: list[int], cont: list[int]) -> Any:
        torch, tf = self._torch, self._tf
        force = _Force(torch, len(prompt), cont)
        ids = self._ids(prompt)
        gcfg = self._generation_config(SamplingParams(max_tokens=len(cont), ignore_eos=True))
        seq = self._model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                   generation_config=gcfg,
                                   logits_processor=tf.LogitsProcessorList([force]))
        if seq[0, len(prompt):].tolist() != cont or len(force.rows) != len(cont):
            raise RuntimeError("teacher forcing through generate() did not follow the "
                               "continuation")
        return torch.stack(force.rows).float().cpu().numpy()

    def _prefill_logits(self, prompt: list[int], cont: list[int]) -> Any:
        torch = self._torch
        with torch.no_grad():
            cache = self._scoring_cache(len(prompt) + len(cont))
            kw = {self._cache_kw: cache, "use_cache": True}
            if len(prompt) > 1:
                self._model(input_ids=self._ids(prompt[:-1]), logits_to_keep=1, **kw)
            out = self._model(input_ids=self._ids([prompt[-1], *cont[:-1]]), **kw)
            return out.logits[0].float().cpu().numpy()

    def topk_trace(self, prompt_ids: Sequence[int], output_ids: Sequence[int],
                   k: int) -> list[list[int]]:
        """The top-``k`` next-token IDs at every position of ``output_ids``, teacher-forced
        (ties: lowest ID first); used by baselines."""
        if not output_ids:
            return []
        scores = self.score(prompt_ids, output_ids, k)
        return [[int(t) for t in row] for row in scores.top_ids.tolist()]

    def close(self) -> None:
        """Free the model (and draft model), the compiled graphs and the CUDA cache; record
        NVML's reading of device memory against the one taken before load."""
        if self.cleanup_evidence is not None:
            return
        torch = self._torch
        compiled = any(getattr(m, "_compiled_call", None) is not None
                       for m in (getattr(self, "_model", None), getattr(self, "_assistant", None))
                       if m is not None)
        self._model = self._assistant = None
        gc.collect()
        if compiled:
            torch._dynamo.reset()  # compiled graphs (and CUDA-graph pools) hold memory
            gc.collect()
        evidence: dict[str, Any] = {"kind": "in_process", "pid": os.getpid(), "survivors": [],
                                    "compiled": compiled}
        allocator_back = True
        if self._on_cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            after = int(torch.cuda.memory_allocated())
            evidence.update(torch_allocated_before_bytes=self._allocated_before,
                            torch_allocated_bytes=after,
                            torch_reserved_bytes=int(torch.cuda.memory_reserved()))
            allocator_back = after <= self._allocated_before
        # NVML: the device's used memory within the context tolerance of the pre-load
        # reading (this process keeps its CUDA context: see GPU_CONTEXT_TOLERANCE_BYTES)
        evidence["gpu"] = srv.gpu_returned(self._gpu_before, wait_s=10.0,
                                           tolerance=GPU_CONTEXT_TOLERANCE_BYTES)
        evidence["verified"] = bool(evidence["gpu"].get("returned", True) and allocator_back)
        self.cleanup_evidence = evidence

    # -- internals ------------------------------------------------------------------------

    def _max_len(self) -> int:
        return int(getattr(self._model.config, "max_position_embeddings", 0) or 1 << 30)

    def _input_device(self) -> Any:
        return self._device if self._device is not None else self._model.device

    def _ids(self, ids: Sequence[int]) -> Any:
        return self._torch.tensor([list(ids)], dtype=self._torch.long,
                                  device=self._input_device())

    def _scoring_cache(self, length: int) -> Any:
        cu = self._tf.cache_utils
        impl = self.requested["cache_implementation"]
        config = self._model.config.get_text_config(decoder=True)
        if impl in STATIC_CACHES:
            size = max(length, int(self.requested.get("max_cache_len") or 0))
            return cu.StaticCache(config=config, max_cache_len=size,
                                  offloading=impl == "offloaded_static")
        if impl == "offloaded":
            return cu.DynamicCache(config=config, offloading=True)
        return cu.DynamicCache(config=config)  # dynamic; quantized scores through dynamic

    def _prompt_ids(self, req: GenerationRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            return self.render_prompt(req.messages)
        assert req.prompt is not None
        return [int(i) for i in self._tokenizer(req.prompt)["input_ids"]]

    def _generation_config(self, p: SamplingParams) -> Any:
        r = self.requested
        kw = generation_kwargs(p)
        kw["pad_token_id"] = self._pad
        impl = r["cache_implementation"]
        if impl != "dynamic":
            kw["cache_implementation"] = impl
        if r.get("max_cache_len") is not None:
            kw["max_cache_len"] = int(r["max_cache_len"])
        if r.get("compile") is False:
            kw["disable_compile"] = True
        if r.get("compile_mode") is not None:
            kw["compile_config"] = self._tf.CompileConfig(mode=r["compile_mode"])
        if r.get("prompt_lookup_num_tokens"):
            kw["prompt_lookup_num_tokens"] = int(r["prompt_lookup_num_tokens"])
        return self._tf.GenerationConfig(**kw)

    def _generate_one(self, req: GenerationRequest) -> GenerationResult:
        t_submit = time.perf_counter()
        try:
            prompt_ids = self._prompt_ids(req)
            return self._decode(req, prompt_ids, t_submit)
        except Exception as exc:  # one failed request must not end the run
            return GenerationResult(request_id=req.id, text="", finish_reason="error",
                                    prompt_tokens=0, output_tokens=0, output_token_ids=None,
                                    t_submit=t_submit, t_first_token=None, t_last_token=None,
                                    error=f"{type(exc).__name__}: {exc}")

    def _decode(self, req: GenerationRequest, prompt_ids: list[int],
                t_submit: float) -> GenerationResult:
        p, torch = req.params, self._torch
        if not prompt_ids:
            raise ValueError("empty prompt")
        if len(prompt_ids) + p.max_tokens > self._max_len():
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({p.max_tokens}) "
                             f"exceeds the context (max_position_embeddings={self._max_len()})")
        watch = _Watch(self, p, len(prompt_ids))
        extra: dict[str, Any] = {}
        if self._assistant is not None:
            extra["assistant_model"] = self._assistant
            if len(self._assistant_tok) != len(self._tokenizer):
                extra.update(tokenizer=self._tokenizer, assistant_tokenizer=self._assistant_tok)
        torch.manual_seed(p.seed)
        ids = self._ids(prompt_ids)
        seq = self._model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                   generation_config=self._generation_config(p),
                                   **_hooks(self._tf, watch, timed=not self._speculative),
                                   **extra)
        out, finish, text = watch.cut(seq[0, len(prompt_ids):].tolist())
        if watch.streamed[:len(out)] != out:
            raise RuntimeError("the tokens streamed differ from what generate() returned")
        times = watch.times[:len(out)]
        return GenerationResult(
            request_id=req.id, text=text if text is not None else self.detokenize(out),
            finish_reason=finish, prompt_tokens=len(prompt_ids), output_tokens=len(out),
            output_token_ids=out, prompt_token_ids=prompt_ids, t_submit=t_submit,
            t_first_token=times[0] if times else None,
            t_last_token=times[-1] if times else None, token_times=times,
            engine_timings={} if self._speculative else watch.engine_timings(len(out),
                                                                             len(prompt_ids)))

    def _effective_config(self) -> dict[str, Any]:
        torch, tf, m, r = self._torch, self._tf, self._model, self.requested
        cfg = m.config
        params = {id(p): p for p in m.parameters()}.values()
        weight_bytes = sum(p.numel() * p.element_size() for p in params)
        emb = m.get_input_embeddings().weight
        out_layer = m.get_output_embeddings()
        tied = out_layer is None or out_layer.weight.data_ptr() == emb.data_ptr()
        emb_bytes = emb.numel() * emb.element_size()
        text = cfg.get_text_config(decoder=True)
        heads = getattr(text, "num_attention_heads", None)
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        head_dim = getattr(text, "head_dim", None) or (
            text.hidden_size // heads if heads else None)
        layers = getattr(text, "num_hidden_layers", None)
        elem = torch.empty((), dtype=m.dtype).element_size()
        kv_pos = (2 * layers * kv_heads * head_dim * elem
                  if layers and kv_heads and head_dim else None)
        device = str(self._device) if self._device is not None else str(m.device)
        if self._on_cuda:
            index = torch.device(device).index if self._device is not None else None
            props = torch.cuda.get_device_properties(index or 0)
            device_name, capability = props.name, f"{props.major}.{props.minor}"
        else:
            from abgate.host import cpu_model

            device_name, capability = cpu_model(), None
        static = r["cache_implementation"] in STATIC_CACHES
        compiled = r.get("compile") is not False and static and self._on_cuda
        eff: dict[str, Any] = {
            "load_format": r["load_format"],
            "weights": RANDOM_WEIGHTS_LABEL if self._dummy else (
                "dequantized from GGUF" if _Source(self.model_path).gguf else "checkpoint"),
            "dtype": str(m.dtype).removeprefix("torch."),
            "attn_implementation": getattr(cfg, "_attn_implementation", None),
            "cache_implementation": r["cache_implementation"],
            "max_cache_len": r.get("max_cache_len"),
            "compile": compiled,
            "compile_mode": (r.get("compile_mode") or "transformers default") if compiled
            else None,
            "device": device,
            "device_map": getattr(m, "hf_device_map", None),
            "device_name": device_name,
            "device_capability": capability,
            "torch_version": str(torch.__version__),
            "transformers_version": str(tf.__version__),
            "cuda_version": torch.version.cuda,
            "torch_num_threads": torch.get_num_threads(),
            "seed": int(r["seed"]),
            "model_type": getattr(cfg, "model_type", None),
            "architecture": type(m).__name__,
            "parameter_count": sum(p.numel() for p in params),
            "weight_bytes": weight_bytes,
            "embedding_bytes": emb_bytes,
            "tied_embedding": tied,
            # what the bandwidth roofline reads (bench/roofline.model_bytes_for):
            "weights_bytes_per_token": weight_bytes - (0 if tied else emb_bytes),
            "kv_bytes_per_position": kv_pos,
            "max_position_embeddings": self._max_len(),
            "max_model_len": self._max_len(),
            "n_vocab": int(emb.shape[0]),
            "tokenizer_size": len(self._tokenizer),
            "eos_token_ids": sorted(self._eos),
            "prompt_lookup_num_tokens": r.get("prompt_lookup_num_tokens"),
            "assistant_model": None,
            "engine_timings_clock": None if self._speculative else (
                "cuda events" if self._on_cuda else "host perf_counter (synchronous forward)"),
            "score_mode": self._score_mode(),
            "scoring_cache": "dynamic" if r["cache_implementation"] == "quantized"
            else r["cache_implementation"],
            "load_seconds": round(self.load_seconds, 3),
        }
        if self._assistant is not None:
            a = self._assistant
            eff["assistant_model"] = {
                "path": resolve_model(r["assistant_model"], what="assistant model"),
                "parameter_count": sum(p.numel() for p in a.parameters()),
                "num_assistant_tokens": getattr(a.generation_config, "num_assistant_tokens",
                                                None)}
        return eff


class _Watch:
    """One request's host-side bookkeeping. The streamer hands over each accepted token
    the moment it reaches the host (timestamped then); the stopping criterion decides
    from the sequence alone (some transformers versions also ask it about speculative
    candidates); the timing marks are CUDA events or host clock readings."""

    def __init__(self, engine: TransformersEngine, p: SamplingParams, prompt_len: int) -> None:
        self.engine, self.p, self.prompt_len = engine, p, prompt_len
        self.torch = engine._torch
        self.cuda = engine._on_cuda
        self.streamed: list[int] = []
        self.times: list[float] = []
        self.start: Any = None
        self.forward_done: list[Any] = []  # one per forward pass that produced logits
        self.on_host: list[Any] = []  # one per streamed batch of tokens

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def put(self, value: Any) -> None:
        """The streamer: the prompt first, then each step's accepted tokens."""
        tokens = [int(t) for t in value.reshape(-1).tolist()]
        now = time.perf_counter()
        if self.start is None:
            self.start = self.mark()
            return
        self.on_host.append(self.mark())
        self.streamed += tokens
        self.times += [now] * len(tokens)

    def logits_ready(self) -> None:
        self.forward_done.append(self.mark())

    def cut(self, generated: list[int]) -> tuple[list[int], Any, str | None]:
        """``(kept tokens, finish reason, text cut at a stop string or None)``: EOS ends
        the output and is not kept (unless ``ignore_eos``), as do a stop string and
        ``max_tokens``."""
        p, eos = self.p, self.engine._eos
        out: list[int] = []
        for tok in generated:
            if not p.ignore_eos and tok in eos:
                return out, "stop", None
            out.append(tok)
            if p.stop:
                text = self.engine.detokenize(out)
                hits = [i for i in (text.find(s) for s in p.stop) if i >= 0]
                if hits:
                    return out, "stop", text[: min(hits)]
            if len(out) >= p.max_tokens:
                break
        return out, "length", None

    def should_stop(self, input_ids: Any) -> bool:
        out, finish, _ = self.cut(input_ids[0, self.prompt_len:].tolist())
        return bool(finish == "stop" or len(out) >= self.p.max_tokens)

    def _ms(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) if self.cuda else (b - a) * 1000.0

    def engine_timings(self, n: int, prompt_tokens: int) -> dict[str, float]:
        """Prefill: start mark to the first forward's end; decode: for each of the ``n``
        kept tokens after the first, the previous token on the host to the end of the
        forward pass that produced it."""
        if n == 0 or self.start is None or len(self.forward_done) < n or \
                len(self.on_host) < n - 1:
            return {}
        if self.cuda:
            self.torch.cuda.synchronize()
        prefill = self._ms(self.start, self.forward_done[0])
        decode = sum(self._ms(self.on_host[k - 1], self.forward_done[k]) for k in range(1, n))
        return {"prompt_eval_ms": prefill, "prompt_eval_tokens": prompt_tokens,
                "eval_ms": decode, "eval_tokens": n - 1}


def _hooks(tf: Any, watch: _Watch, timed: bool) -> dict[str, Any]:
    """``generate`` keyword arguments carrying the watch: the streamer (tokens on the
    host), the stopping criterion, and where timed an identity logits processor (the
    forward pass has ended). generate() calls them by duck typing."""
    hooks: dict[str, Any] = {"streamer": _Stream(watch),
                             "stopping_criteria": tf.StoppingCriteriaList([_Arrived(watch)])}
    if timed:
        hooks["logits_processor"] = tf.LogitsProcessorList([_ForwardDone(watch)])
    return hooks


class _Arrived:
    """Stopping criterion: EOS, a stop string or max_tokens in the sequence."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        stop = self.watch.should_stop(input_ids)
        torch = self.watch.torch
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool,
                          device=input_ids.device)


class _ForwardDone:
    """Identity logits processor: the forward pass that made these logits has ended."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.watch.logits_ready()
        return scores


class _Force:
    """Logits processor for teacher forcing: keep each step's raw logits, then allow only
    the continuation's next token."""

    def __init__(self, torch: Any, prompt_len: int, cont: list[int]) -> None:
        self.torch, self.prompt_len, self.cont = torch, prompt_len, cont
        self.rows: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        step = int(input_ids.shape[1]) - self.prompt_len
        self.rows.append(scores[0].clone())
        forced = self.torch.full_like(scores, float("-inf"))
        forced[:, self.cont[min(step, len(self.cont) - 1)]] = 0.0
        return forced


class _Stream:
    """Streamer: the prompt first, then each step's accepted tokens."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def put(self, value: Any) -> None:
        self.watch.put(value)

    def end(self) -> None:
        pass
