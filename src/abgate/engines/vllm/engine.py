"""vLLM in-process (engine ``vllm``; ``pip install 'abgate[vllm]'``).

``vllm.LLM(model, **engine_args)`` is loaded once and kept resident. Requests go
through the engine's own step loop (``llm_engine.add_request`` / ``step``), at most
``concurrency`` in flight (engine option, default 1), so each new output token gets a
``perf_counter`` timestamp at the step that produced it (tokens of one step share
it). Chat messages are rendered with the model's tokenizer chat template and sent as
token IDs, so the prompt IDs are exact; output token IDs come from the engine.

Engine args are validated against the fields of ``vllm.engine.arg_utils.EngineArgs``
(read from the installed vLLM, so they track its version). The effective
configuration (dtype, KV-cache dtype, TP/PP sizes, max model length, prefix caching,
graph mode) is read back from the engine after load. Only this module imports vLLM,
and only when the engine is used.
"""

from __future__ import annotations

import dataclasses
import gc
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
)
from abgate.engines.shared import server_cleanup as srv
from abgate.engines.shared import supervise as supervise
from abgate.engines.shared.multicast import MULTICAST_OFF, multicast_off
from abgate.engines.shared.prompt_logprobs import scores_from_rows
from abgate.engines.vllm.args import ARG_SPECS as ARG_SPECS  # the adapter's
from abgate.engines.vllm.args import INSTALL_HINT
from abgate.engines.vllm.args import spec_for as spec_for
from abgate.engines.vllm.args import specs_from_dataclass as specs_from_dataclass
from abgate.engines.vllm.effective import effective_config as effective_config
from abgate.engines.vllm.effective import jsonable as jsonable
from abgate.engines.vllm.weights import model_bytes
from abgate.engines.vllm.worker_facts import ranks_entry
from abgate.errors import AbgateError, UsageError, did_you_mean

NAME = "vllm"
_OPTIONS = frozenset({"concurrency"})
# Prefix caching off unless asked (as the llamacpp engine clears its KV cache per
# request): a bench repeats one prompt, and a cache hit would be measured as prefill.
DEFAULTS: Mapping[str, Any] = {"seed": 0, "enable_prefix_caching": False}
# where the workers' watchdog says what it ended if abgate dies (supervise.watch)
WATCHDOG_LOG = "engine-watchdog.log"


# -- pure helpers -----------------------------------------------------------------------


def sampling_kwargs(p: SamplingParams) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments: every knob explicit."""
    return {
        "n": 1,
        "max_tokens": p.max_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k if p.top_k > 0 else -1,
        "min_p": 0.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "seed": p.seed,
        "stop": list(p.stop),
        "ignore_eos": p.ignore_eos,
    }


def chat_prompt_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The token IDs of ``messages`` rendered with the tokenizer's chat template and the
    generation prompt, as vLLM's own chat path renders them (template, then the text
    tokenized without adding special tokens again).

    ``apply_chat_template(..., tokenize=True)`` returns a list of IDs in transformers 4
    and a ``BatchEncoding`` (a mapping holding ``input_ids``) in transformers 5; both
    are accepted, and anything else is an error naming what came back."""
    out = tokenizer.apply_chat_template([dict(m) for m in messages],
                                        add_generation_prompt=True, tokenize=True)
    return token_id_list(out, "apply_chat_template")


def token_id_list(value: Any, where: str) -> list[int]:
    """A flat list of token IDs from what a tokenizer returned: a list, a mapping with
    ``input_ids`` (``BatchEncoding``), or a batch of one."""
    if isinstance(value, Mapping) or hasattr(value, "keys") and "input_ids" in value:
        value = value["input_ids"]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list | tuple) and len(value) == 1 and isinstance(value[0], list | tuple):
        value = value[0]
    if not isinstance(value, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise AbgateError(f"{where} returned {type(value).__name__}, not a list of token IDs")
    return [int(i) for i in value]


# -- the module API -----------------------------------------------------------------------


def resolve_model(model: str | None) -> str:
    """A local model directory (resolved) or a Hugging Face model id, as given. What is
    written as a path (absolute, ``./``, ``~``, more than one ``/``) must exist: vLLM
    would otherwise take it for a hub id and fail late with an unrelated message."""
    if not model:
        raise UsageError("the vllm engine needs --model (a Hugging Face model id or a local "
                         "model directory)")
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"--model {model}: the vllm engine takes a model directory or a "
                             "hub id, not a file")
        return str(path.resolve())
    if looks_like_path(model):
        raise UsageError(f"--model {model}: no such model directory")
    return model


def looks_like_path(model: str) -> bool:
    """Whether ``model`` is written as a file-system path rather than a hub id
    (``org/name`` or ``name``)."""
    return (model.startswith(("/", "./", "../", "~", ".\\")) or model in (".", "..")
            or model.count("/") > 1 or model.endswith("/"))


def load(model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
         run_dir: Path | None = None) -> VllmEngine:
    log = None if run_dir is None else str(run_dir / WATCHDOG_LOG)
    return VllmEngine(model, args, check_options(options or {}), watchdog_log=log)


def check_options(options: Mapping[str, Any]) -> int:
    """The vllm engine's only engine option is ``concurrency``; returns it (default 1)."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise UsageError(f"the vllm engine takes only --concurrency (got {', '.join(unknown)})"
                         + did_you_mean(unknown[0], _OPTIONS))
    concurrency = options.get("concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UsageError(f"--concurrency must be an integer >= 1, got {concurrency!r}")
    return concurrency


class VllmEngine(Engine):
    """vLLM, resident in this process."""

    name = NAME
    arg_specs = ARG_SPECS
    packages = (("vllm", "pip install 'abgate[vllm]' (on a machine vLLM supports)"),)

    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        return resolve_model(model)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        check_options(options)

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> VllmEngine:
        return load(model, args, options, run_dir)

    capabilities = Capabilities(token_ids=True, logprobs=False, streaming=True,
                                chat_template=True, concurrent=True, engine_timings=False,
                                scoring="top_k")
    process_env = MULTICAST_OFF  # the EngineCore and every TP/PP worker start with it

    def __init__(self, model: str, args: Mapping[str, Any], concurrency: int = 1,
                 watchdog_log: str | None = None) -> None:
        try:
            import vllm
        except ImportError:
            raise UsageError(INSTALL_HINT) from None
        self._vllm, self.model, self.concurrency = vllm, model, concurrency
        self.requested = {**DEFAULTS, **args}
        self.cleanup_evidence: dict[str, Any] | None = None
        self._gpu_before = srv.gpu_memory()
        self._children_before = srv.child_pids()
        try:
            with multicast_off():  # inherited by the EngineCore and every worker it starts
                self._llm: Any = vllm.LLM(model=model, **self.requested)
        except (ValueError, RuntimeError, OSError) as exc:
            raise AbgateError(f"vLLM could not load {model}: {exc}") from None
        self._workers: dict[int, tuple[float, str]] = {}  # pid -> (start time, command)
        srv.new_children(self._children_before, self._workers)
        # ends the workers if abgate dies outright (SIGKILL): they are our children, so no
        # subreaper holds them; the watchdog itself is no worker of the engine
        self._watchdog = supervise.start_watchdog(self._workers, watchdog_log)
        if self._watchdog is not None:
            self._children_before.add(self._watchdog.pid)
        self._tokenizer = self._llm.get_tokenizer()
        self._seq = 0
        self._weights: dict[str, Any] | None = None  # roofline figures, counted once

    # -- the protocol -------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        return chat_prompt_ids(self._tokenizer, messages)

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        results: dict[str, GenerationResult] = {}
        pending = list(requests)
        live: dict[str, _Live] = {}
        engine = self._llm.llm_engine
        while pending or live:
            while pending and len(live) < self.concurrency:
                self._submit(engine, pending.pop(0), live, results, on_result)
            if not live:
                continue
            for out in engine.step():
                now = time.perf_counter()
                rid = _our_id(str(out.request_id), live)
                if rid is None:
                    continue
                state = live[rid]
                state.update(out, now)
                if out.finished:
                    del live[rid]
                    results[state.req.id] = state.result(out)
                    if on_result is not None:
                        on_result(results[state.req.id])
        return [results[r.id] for r in requests]

    def loaded_weights(self) -> dict[str, LoadedTensor]:
        from abgate.engines.vllm.runtime_weights import loaded_weights
        return loaded_weights(self._llm)

    def describe(self) -> EngineInfo:
        effective = {"requested_engine_args": {k: jsonable(v) for k, v in self.requested.items()},
                     "concurrency": self.concurrency,
                     **effective_config(self._llm.llm_engine)}
        if self._weights is None:
            self._weights = {**model_bytes(getattr(self._llm.llm_engine, "model_config", None),
                                           effective.get("kv_cache_dtype")),
                             **ranks_entry(self._llm)}  # every worker's facts, read once
        effective.update(self._weights)
        return EngineInfo(name=NAME, version=str(getattr(self._vllm, "__version__", "unknown")),
                          model=self.model, effective_config=effective,
                          capabilities=self.capabilities)

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        """Top-k teacher-forced log-probs from vLLM's ``prompt_logprobs`` over the
        prompt and continuation (one request; ``top_k`` at most the engine's
        ``max_logprobs``, 20 by default): see :mod:`abgate.engines.shared.prompt_logprobs`."""
        prompt, cont = [int(t) for t in prompt_token_ids], [int(t) for t in continuation]
        if not prompt or not cont:
            raise ValueError("scoring needs a non-empty prompt and continuation")
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0,
                                           prompt_logprobs=top_k, detokenize=False)
        (out,) = self._llm.generate([{"prompt_token_ids": prompt + cont}], params,
                                    use_tqdm=False)
        return scores_from_rows(list(out.prompt_logprobs or ()), prompt, cont, top_k)

    def processes(self) -> list[int]:
        """This process and the workers vLLM started (the EngineCore process, and one
        worker per rank with multiprocessing executors)."""
        srv.new_children(self._children_before, self._workers)
        return [os.getpid(), *sorted(srv.child_pids() - self._children_before)]

    def close(self) -> None:
        """Free the engine, its workers and GPU memory; record what was checked."""
        if self.cleanup_evidence is not None:
            return
        srv.new_children(self._children_before, self._workers)
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:  # we stop the workers ourselves now
            watchdog.terminate()
            watchdog.wait(timeout=10)
        llm, self._llm = getattr(self, "_llm", None), None
        shutdown = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None),
                           "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm
        gc.collect()
        _release_distributed()
        self.cleanup_evidence = srv.verify_children_gone(self._children_before, self._workers)
        # this process keeps its CUDA context until it exits, hence the wider tolerance
        self.cleanup_evidence["gpu"] = srv.gpu_returned(self._gpu_before,
                                                        tolerance=2 << 30, wait_s=15.0)
        self.cleanup_evidence["verified"] = (not self.cleanup_evidence["survivors"]
                                             and self.cleanup_evidence["gpu"].get("returned",
                                                                                  True))

    # -- internals ----------------------------------------------------------------------

    def _submit(self, engine: Any, req: GenerationRequest, live: dict[str, _Live],
                results: dict[str, GenerationResult], on_result: OnResult | None) -> None:
        t_submit = time.perf_counter()
        try:
            prompt_ids = self._prompt_ids(req)
            params = self._vllm.SamplingParams(**sampling_kwargs(req.params))
            self._seq += 1
            rid = f"abgate-{self._seq}"
            engine.add_request(rid, {"prompt_token_ids": prompt_ids}, params)
        except Exception as exc:  # one bad request must not end the run
            results[req.id] = GenerationResult.failed(req.id, t_submit,
                                                      f"{type(exc).__name__}: {exc}")
            if on_result is not None:
                on_result(results[req.id])
            return
        live[rid] = _Live(req, prompt_ids, t_submit)

    def _prompt_ids(self, req: GenerationRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            return self.render_prompt(req.messages)
        assert req.prompt is not None
        return [int(i) for i in self._tokenizer.encode(req.prompt)]


@dataclasses.dataclass
class _Live:
    """One request in flight: its new tokens get the time of the step that made them."""

    req: GenerationRequest
    prompt_ids: list[int]
    t_submit: float
    times: list[float] = dataclasses.field(default_factory=list)

    def update(self, out: Any, now: float) -> None:
        n = len(out.outputs[0].token_ids)
        self.times += [now] * (n - len(self.times))

    def result(self, out: Any) -> GenerationResult:
        comp = out.outputs[0]
        ids = [int(i) for i in comp.token_ids]
        finish = {"stop": "stop", "length": "length"}.get(str(comp.finish_reason))
        return GenerationResult(
            request_id=self.req.id, text=comp.text, finish_reason=finish or "error",  # type: ignore[arg-type]
            error=None if finish else f"vLLM finish_reason {comp.finish_reason!r}",
            prompt_tokens=len(self.prompt_ids), output_tokens=len(ids), output_token_ids=ids,
            prompt_token_ids=self.prompt_ids, t_submit=self.t_submit,
            t_first_token=self.times[0] if self.times else None,
            t_last_token=self.times[-1] if self.times else None, token_times=list(self.times))


def _our_id(rid: str, live: Mapping[str, _Live]) -> str | None:
    """Our request ID for an output (some vLLM versions add a suffix to it)."""
    if rid in live:
        return rid
    return next((k for k in live if rid.startswith(k + "-")), None)


def _release_distributed() -> None:
    """vLLM's documented teardown of its distributed state, then the CUDA cache."""
    try:
        from vllm.distributed.parallel_state import (
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:  # older/newer layouts, or nothing was initialised
        pass
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass
