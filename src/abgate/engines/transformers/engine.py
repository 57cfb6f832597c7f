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
0, docs/gpu.md). Loading is ``loading.py``'s, the scoring passes ``scoring.py``'s, a
request's ``GenerationConfig`` ``generation.py``'s and the release at close
``cleanup.py``'s; only this package touches torch and transformers, imported
(``loading.import_libraries``) only when the engine is used.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.engines.base import (
    Capabilities,
    Engine,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    LoadedTensor,
    Message,
    OnResult,
    SamplingParams,
    TokenScores,
    one_at_a_time,
)
from abgate.engines.shared import server_cleanup as srv
from abgate.engines.shared.logits import scores_from_logits
from abgate.engines.transformers import cleanup, scoring
from abgate.engines.transformers import determinism as det
from abgate.engines.transformers import loading as ld
from abgate.engines.transformers.describe import device_facts, weight_facts
from abgate.engines.transformers.generation import generation_config
from abgate.engines.transformers.hooks import _hooks, _Watch
from abgate.engines.transformers.options import (  # noqa: F401  (the engine module's API)
    ARG_SPECS,
    DEFAULTS,
    INSTALL_HINT,
    NAME,
    RANDOM_WEIGHTS_LABEL,
    STATIC_CACHES,
    check_args,
    resolve_model,
)
from abgate.errors import AbgateError

_HINT = "pip install 'abgate[transformers]'"


# -- the engine ---------------------------------------------------------------------------


class TransformersEngine(Engine):
    """A transformers causal LM, resident in this process."""

    name = NAME
    arg_specs = ARG_SPECS
    in_process = True
    packages = (("torch", _HINT), ("transformers", _HINT))

    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        return resolve_model(model)

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        check_args(args)

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> TransformersEngine:
        cls.check_options(options or {})
        return cls(model, args)

    capabilities = Capabilities(token_ids=True, logprobs=False, streaming=True,
                                chat_template=True, concurrent=False, engine_timings=True,
                                scoring="full")

    def __init__(self, model: str, args: Mapping[str, Any]) -> None:
        check_args(args)
        torch, self._tf = ld.import_libraries()
        self._torch = torch
        self.model_path = model
        self.requested = {**DEFAULTS, **args}
        self.cleanup_evidence: dict[str, Any] | None = None
        r = self.requested
        self._dummy = r["load_format"] == "dummy"
        self._speculative = bool(r.get("assistant_model") or r.get("prompt_lookup_num_tokens"))
        device = r.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        self._device = torch.device(device) if r.get("device_map") is None else None
        self._on_cuda = ld.uses_cuda(torch, device, r.get("device_map"))
        self._deterministic = bool(r["deterministic"])
        det.prepare(torch, self._deterministic, self._on_cuda)
        if self._on_cuda:
            ld.start_cuda(torch, self._device)
        self._gpu_before = srv.gpu_memory() if self._on_cuda else {
            "available": False, "reason": f"the engine runs on {device}"}
        self._allocated_before = int(torch.cuda.memory_allocated()) if self._on_cuda else 0
        t0 = time.perf_counter()
        try:
            with ld.gguf_parsed_once():
                self._tokenizer = ld.load_tokenizer(self._tf, model)
                self._model = ld.load_model(torch, self._tf, model, r, self._device)
                self._assistant, self._assistant_tok = ld.load_assistant(
                    self._tf, r, self._model, self._device)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AbgateError(f"transformers could not load {model}: {first}") from None
        self.load_seconds = time.perf_counter() - t0
        self._eos = ld.eos_ids(self._tokenizer, self._model)
        self._pad = ld.neutral_generation_config(self._tf, self._tokenizer, self._eos,
                                                 (self._model, self._assistant))
        self._cache_kw = ("cache" if "cache" in inspect.signature(self._model.forward).parameters
                          else "past_key_values")
        if not self._tokenizer.chat_template:
            self.capabilities = Capabilities(**{**vars(type(self).capabilities),
                                                "chat_template": False})
        if self._speculative:
            self.capabilities = Capabilities(**{**vars(self.capabilities),
                                                "engine_timings": False})
        ld.check_compile(self._tf, r, self._on_cuda)
        self._info = self._effective_config()

    # -- the protocol ---------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return [int(i) for i in self._tokenizer(text, add_special_tokens=False)["input_ids"]]

    def loaded_weights(self) -> dict[str, LoadedTensor]:
        from abgate.engines.transformers.weights import loaded_weights
        return loaded_weights(self._model)

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
        return one_at_a_time(requests, on_result, self._prompt_ids, self._scoped_decode)

    def _scoped_decode(self, req: GenerationRequest, prompt_ids: list[int],
                       t_submit: float) -> GenerationResult:
        with det.scope(self._torch, self._deterministic):
            return self._decode(req, prompt_ids, t_submit)

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
        with det.scope(self._torch, self._deterministic):
            if self._score_mode() == "decode":
                logits = self._decode_logits(prompt, cont)
            else:
                logits = self._prefill_logits(prompt, cont)
        return scores_from_logits(logits, cont, top_k)

    def _score_mode(self) -> str:
        return "prefill" if self._speculative else str(self.requested["score_mode"])

    def _decode_logits(self, prompt: list[int], cont: list[int]) -> Any:
        gcfg = generation_config(self._tf, self.requested, self._pad,
                                SamplingParams(max_tokens=len(cont), ignore_eos=True))
        return scoring.decode_logits(self._torch, self._tf, self._model, self._ids(prompt),
                                     gcfg, cont)

    def _prefill_logits(self, prompt: list[int], cont: list[int]) -> Any:
        with self._torch.no_grad():
            cache = scoring.scoring_cache(self._tf, self._model, self.requested,
                                          len(prompt) + len(cont))
        head = self._ids(prompt[:-1]) if len(prompt) > 1 else None
        return scoring.prefill_logits(self._torch, self._model,
                                      {self._cache_kw: cache, "use_cache": True}, head,
                                      self._ids([prompt[-1], *cont[:-1]]))

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
        was_compiled = cleanup.compiled((getattr(self, "_model", None),
                                         getattr(self, "_assistant", None)))
        self._model = self._assistant = None
        self.cleanup_evidence = cleanup.release(self._torch, was_compiled, self._on_cuda,
                                                self._allocated_before, self._gpu_before)

    # -- internals ------------------------------------------------------------------------

    def _max_len(self) -> int:
        return int(getattr(self._model.config, "max_position_embeddings", 0) or 1 << 30)

    def _input_device(self) -> Any:
        return self._device if self._device is not None else self._model.device

    def _ids(self, ids: Sequence[int]) -> Any:
        return self._torch.tensor([list(ids)], dtype=self._torch.long,
                                  device=self._input_device())

    def _prompt_ids(self, req: GenerationRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            return self.render_prompt(req.messages)
        assert req.prompt is not None
        return [int(i) for i in self._tokenizer(req.prompt)["input_ids"]]

    def _decode(self, req: GenerationRequest, prompt_ids: list[int],
                t_submit: float) -> GenerationResult:
        p, torch = req.params, self._torch
        if not prompt_ids:
            raise ValueError("empty prompt")
        if len(prompt_ids) + p.max_tokens > self._max_len():
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({p.max_tokens}) "
                             f"exceeds the context (max_position_embeddings={self._max_len()})")
        watch = _Watch(torch, self._on_cuda, self._eos, self.detokenize, p, len(prompt_ids))
        extra: dict[str, Any] = {}
        if self._assistant is not None:
            extra["assistant_model"] = self._assistant
            if len(self._assistant_tok) != len(self._tokenizer):
                extra.update(tokenizer=self._tokenizer, assistant_tokenizer=self._assistant_tok)
        torch.manual_seed(p.seed)
        ids = self._ids(prompt_ids)
        seq = self._model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                   generation_config=generation_config(
                                       self._tf, self.requested, self._pad, p),
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
        static = r["cache_implementation"] in STATIC_CACHES
        compiled = r.get("compile") is not False and static and self._on_cuda
        device = str(self._device) if self._device is not None else str(m.device)
        eff: dict[str, Any] = {
            **device_facts(torch, device, self._on_cuda, self._device is not None),
            **weight_facts(torch, m),
            "load_format": r["load_format"],
            "weights": RANDOM_WEIGHTS_LABEL if self._dummy else (
                "dequantized from GGUF" if ld.Source(self.model_path).gguf else "checkpoint"),
            "dtype": str(m.dtype).removeprefix("torch."),
            "attn_implementation": getattr(cfg, "_attn_implementation", None),
            "cache_implementation": r["cache_implementation"],
            "max_cache_len": r.get("max_cache_len"),
            "compile": compiled,
            "compile_mode": (r.get("compile_mode") or "transformers default") if compiled
            else None,
            "device_map": r.get("device_map"),
            # accelerate's placement; transformers sets none when all sits on one device
            "device_map_placed": (getattr(m, "hf_device_map", None) or {"": device})
            if r.get("device_map") is not None else None,
            "torch_version": str(torch.__version__),
            "transformers_version": str(tf.__version__),
            "cuda_version": torch.version.cuda,
            "torch_num_threads": torch.get_num_threads(),
            "seed": int(r["seed"]),
            **det.facts(torch, self._deterministic, self._on_cuda),
            "model_type": getattr(cfg, "model_type", None),
            "architecture": type(m).__name__,
            "max_position_embeddings": self._max_len(),
            "max_model_len": self._max_len(),
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


load = TransformersEngine.load  # the module's ``load``: the class's own
