"""The embedded default engine: llama.cpp in-process through ``llama-cpp-python``.

Generation runs our own token loop over ``Llama.generate`` so that every output token
gets a ``perf_counter`` timestamp the moment it is sampled, output token IDs are
exact, and sampling is fully explicit (no hidden ``min_p``/``repeat_penalty``
defaults). The KV cache is cleared before every request unless ``prefix_cache=true``:
reusing a cached prefix changes batch shapes, which can change greedy outputs and
would make TTFT depend on request order.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from abgate.engines.base import (
    Capabilities,
    Engine,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    LoadedTensor,
    Message,
    OnResult,
    TokenScores,
    one_at_a_time,
)
from abgate.engines.llamacpp.args import (  # noqa: F401  (the engine module's API)
    ARG_SPECS,
    DEFAULTS,
    GGML_NAMES,
    default_threads,
    extra_bufts,
)
from abgate.engines.llamacpp.state import DEFAULT_BUDGET_BYTES, PromptStates
from abgate.engines.llamacpp.weights import tensor_types
from abgate.engines.shared.default_model import default_model_path
from abgate.engines.shared.logits import scores_from_logits
from abgate.errors import AbgateError, UsageError
from abgate.gguf_file import read_gguf

NAME = "llamacpp"

_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def model_params(**fields: Any) -> Iterator[None]:
    """``Llama()`` builds its model params from ``llama_model_default_params()`` and
    exposes no keyword for some fields (``use_extra_bufts``): for the block, the
    defaults it gets carry ``fields``."""
    import llama_cpp.llama_cpp as lc

    original = lc.llama_model_default_params

    def defaults() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    with _PARAMS_LOCK:
        lc.llama_model_default_params = defaults
        try:
            yield
        finally:
            lc.llama_model_default_params = original


def _valid_gguf(path: Path, what: str) -> dict[str, Any]:
    """The whole GGUF header read with abgate's own reader (a truncated file or a
    garbage header is refused here, not inside llama.cpp); its metadata."""
    try:
        return read_gguf(path).metadata
    except AbgateError as exc:
        raise UsageError(f"{what} {exc}") from None
    except (OSError, ValueError) as exc:  # mmap of an empty file, an unreadable one
        raise UsageError(f"{what} {path}: cannot be read as GGUF ({exc})") from None


class LlamaCppEngine(Engine):
    """llama.cpp, resident in this process."""

    name = NAME
    arg_specs = ARG_SPECS
    in_process = True
    packages = (("llama_cpp", "pip install llama-cpp-python"),)

    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        """Check the model path before anything loads."""
        path = default_model_path() if model is None else Path(model)
        if not path.is_file():
            raise UsageError(f"model file not found: {path}")
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise UsageError(f"{path} is not a GGUF file (the llamacpp engine reads GGUF)")
        _valid_gguf(path, "model")
        return str(path.resolve())

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        """Path arguments checked before load (llama.cpp crashes on a bad LoRA file)."""
        lora = args.get("lora_path")
        if lora is None:
            return
        path = Path(lora)
        if not path.is_file():
            raise UsageError(f"--engine-arg lora_path={lora}: no such file")
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise UsageError(f"--engine-arg lora_path={lora}: not a GGUF LoRA adapter")
        kind = _valid_gguf(path, "--engine-arg lora_path:").get("general.type")
        if kind is not None and kind != "adapter":
            raise UsageError(f"--engine-arg lora_path={lora}: a GGUF {kind!r}, not a LoRA "
                             "adapter (general.type must be 'adapter')")

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> LlamaCppEngine:
        cls.check_options(options or {})
        return cls(model, args)

    capabilities = Capabilities(token_ids=True, logprobs=False, streaming=True,
                                chat_template=True, concurrent=False, engine_timings=True,
                                scoring="full")

    def __init__(self, model_path: str, args: Mapping[str, Any]) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._lc = llama_cpp
        merged = {**DEFAULTS, "n_threads": default_threads(), **args}
        self._prefix_cache = bool(merged.pop("prefix_cache"))
        self._extra_bufts = extra_bufts(merged.pop("use_extra_bufts", None))
        self.requested = dict(merged)
        self.model_path = model_path
        try:
            with model_params(use_extra_bufts=self._extra_bufts):
                self._llm = llama_cpp.Llama(model_path=model_path, verbose=False, **merged)
        except (ValueError, RuntimeError) as exc:
            raise AbgateError(f"llama.cpp could not load {model_path}: {exc}") from None
        llm = self._llm
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise UsageError(f"{model_path} has no chat template in its GGUF metadata")
        vocab = llm._model
        eos, bos = llm.token_eos(), llm.token_bos()
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=vocab.token_get_text(eos) if eos != -1 else "",
            bos_token=vocab.token_get_text(bos) if bos != -1 else "",
        )
        self._states = PromptStates(llama_cpp, budget_bytes=0)  # off until asked for

    @property
    def prompts_restored(self) -> int | None:
        """How many ``score`` calls restored a kept prompt instead of prefilling it."""
        return self._states.hits

    def keep_prompt_states(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> bool:
        """Keep each request's prompt KV cells (up to ``budget_bytes``) for ``score``
        (an A/B with distribution agreement asks for this before generating)."""
        self._states = PromptStates(self._lc, budget_bytes)
        return True

    # -- the protocol -------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def loaded_weights(self) -> dict[str, LoadedTensor] | None:
        from abgate.engines.llamacpp.weights import loaded_weights
        return loaded_weights(self.model_path)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._llm.detokenize(list(ids)).decode("utf-8", errors="replace")

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        res = self._formatter(messages=[dict(m) for m in messages])  # type: ignore[misc]
        return list(self._llm.tokenize(res.prompt.encode("utf-8"),
                                       add_bos=not res.added_special, special=True))

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        return one_at_a_time(requests, on_result, self._prompt_ids, self._decode)

    def describe(self) -> EngineInfo:
        llm, lc = self._llm, self._lc
        cp, mp = llm.context_params, llm.model_params
        fa = {-1: "auto", 0: False, 1: True}.get(int(cp.flash_attn_type), cp.flash_attn_type)
        effective = {
            "n_ctx": self._n_ctx(),
            "n_batch": int(cp.n_batch),
            "n_ubatch": int(cp.n_ubatch),
            "n_threads": int(cp.n_threads),
            "n_threads_batch": int(cp.n_threads_batch),
            "flash_attn": fa,
            "type_k": GGML_NAMES.get(int(cp.type_k), int(cp.type_k)),
            "type_v": GGML_NAMES.get(int(cp.type_v), int(cp.type_v)),
            "n_gpu_layers": int(mp.n_gpu_layers),
            "load_mode": int(mp.load_mode),
            "use_extra_bufts": bool(mp.use_extra_bufts),
            "offload_kqv": bool(cp.offload_kqv),
            "seed": int(self.requested.get("seed", 0)),
            "prefix_cache": self._prefix_cache,
            "n_vocab": llm.n_vocab(),
            "model_params": int(lc.llama_model_n_params(llm.model)),
            "model_size_bytes": int(lc.llama_model_size(llm.model)),
            "model_name": llm.metadata.get("general.name"),
            "n_seq_max": int(lc.llama_n_seq_max(llm.ctx)),
            "tensor_types": tensor_types(self.model_path),
            "system_info": lc.llama_print_system_info().decode(errors="replace").strip(),
        }
        return EngineInfo(name=NAME, version=lc.__version__, model=self.model_path,
                          effective_config=effective, capabilities=self.capabilities)

    def processes(self) -> list[int]:
        return [os.getpid()]

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is not None:
            llm.close()
            self._llm = None  # type: ignore[assignment]

    # -- internals ----------------------------------------------------------------------

    def _n_ctx(self) -> int:
        """Usable context: llama.cpp may pad n_ctx up (to a multiple of 256), but
        llama-cpp-python's token buffer keeps the requested size."""
        return min(self._llm.n_ctx(), int(self._llm.context_params.n_ctx))

    def _prompt_ids(self, req: GenerationRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            return self.render_prompt(req.messages)
        assert req.prompt is not None
        return list(self._llm.tokenize(req.prompt.encode("utf-8"), add_bos=True, special=True))

    def _decode(self, req: GenerationRequest, prompt_ids: list[int],
                t_submit: float) -> GenerationResult:
        llm, lc, p = self._llm, self._lc, req.params
        n_ctx = self._n_ctx()
        if len(prompt_ids) + p.max_tokens > n_ctx:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({p.max_tokens}) "
                             f"exceeds the context (n_ctx={n_ctx})")
        if not self._prefix_cache:
            llm.reset()  # type: ignore[no-untyped-call]
        llm.set_seed(p.seed)
        lc.llama_perf_context_reset(llm.ctx)
        out: list[int] = []
        times: list[float] = []
        finish = "length"
        gen: Generator[int, Any, None] = (
            self._greedy_tokens(prompt_ids) if p.greedy and not self._prefix_cache else
            llm.generate(prompt_ids, top_k=p.top_k, top_p=p.top_p, min_p=0.0, typical_p=1.0,
                         temp=p.temperature, repeat_penalty=1.0, frequency_penalty=0.0,
                         presence_penalty=0.0, reset=True))
        text: str | None = None
        for tok in gen:
            now = time.perf_counter()
            if not p.ignore_eos and lc.llama_vocab_is_eog(llm._model.vocab, tok):
                finish = "stop"
                break
            out.append(tok)
            times.append(now)
            if p.stop:
                text = self._stop_cut(out, prompt_ids, p.stop)
                if text is not None:
                    finish = "stop"
                    break
            if len(out) >= p.max_tokens:
                break
        gen.close()
        perf = lc.llama_perf_context(llm.ctx)
        if not self._prefix_cache and self._states.keep(llm.ctx, prompt_ids):
            llm.n_tokens = len(prompt_ids) - 1
        if text is None:
            text = llm.detokenize(out, prev_tokens=prompt_ids).decode("utf-8", errors="replace")
        return GenerationResult(
            request_id=req.id, text=text, finish_reason=finish,  # type: ignore[arg-type]
            prompt_tokens=len(prompt_ids), output_tokens=len(out), output_token_ids=out,
            prompt_token_ids=prompt_ids, t_submit=t_submit,
            t_first_token=times[0] if times else None,
            t_last_token=times[-1] if times else None, token_times=times,
            engine_timings={"prompt_eval_ms": float(perf.t_p_eval_ms),
                            "prompt_eval_tokens": int(perf.n_p_eval),
                            "eval_ms": float(perf.t_eval_ms), "eval_tokens": int(perf.n_eval)},
        )

    def _greedy_tokens(self, prompt_ids: list[int]) -> Generator[int, None, None]:
        """Greedy decoding with as little Python per token as possible (see
        docs/metrics.md, "Making the loop lean"): the prompt goes through
        ``Llama.eval``; each next token is the argmax of the last logits (the token the
        greedy sampler chain picks: its penalties are neutral here and ties go to the
        lowest ID in both) and is decoded with one ``llama_decode`` call on a reused
        one-token batch. The last token yielded is never evaluated, as with
        ``Llama.generate``; ``n_tokens``/``input_ids`` are kept in step."""
        llm, lc = self._llm, self._lc
        logits_type = ctypes.c_float * llm.n_vocab()
        token = (lc.llama_token * 1)()
        batch = lc.llama_batch_get_one(token, 1)  # positions continue after the prompt
        llm.eval(prompt_ids)
        ctx = llm.ctx
        while True:
            address = ctypes.addressof(lc.llama_get_logits_ith(ctx, -1).contents)
            logits = memoryview(logits_type.from_address(address))
            tok = int(np.frombuffer(logits, np.float32).argmax())
            yield tok
            token[0] = tok
            rc = lc.llama_decode(ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            llm.input_ids[llm.n_tokens] = tok
            llm.n_tokens += 1

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        """Full-vocabulary teacher-forced log-probs (see :class:`TokenScores`): the
        prompt is evaluated, then the continuation (shifted by one) in batches of up to
        ``n_batch`` tokens with logits kept for every position, as llama.cpp's
        perplexity tool does. The KV cache is cleared before and after. A prompt kept
        from generation (:meth:`keep_prompt_states`) is restored, not prefilled."""
        llm = self._llm
        prompt, cont = list(prompt_token_ids), list(continuation)
        if not prompt or not cont:
            raise ValueError("scoring needs a non-empty prompt and continuation")
        if len(prompt) + len(cont) > self._n_ctx():
            raise ValueError(f"prompt + continuation ({len(prompt) + len(cont)} tokens) "
                             f"exceeds the context (n_ctx={self._n_ctx()})")
        llm.reset()  # type: ignore[no-untyped-call]
        if len(prompt) > 1 and not self._prefix_cache and self._states.restore(llm.ctx, prompt):
            llm.input_ids[:len(prompt) - 1] = prompt[:-1]
            llm.n_tokens = len(prompt) - 1
        elif len(prompt) > 1:
            llm.eval(prompt[:-1])
        fed = [prompt[-1], *cont[:-1]]  # row j: the distribution cont[j] is scored under
        logits = np.empty((len(fed), llm.n_vocab()), dtype=np.float32)
        for start in range(0, len(fed), llm.n_batch):
            logits[start:start + llm.n_batch] = self._decode_all_logits(
                fed[start:start + llm.n_batch])
        llm.reset()  # type: ignore[no-untyped-call]
        return scores_from_logits(logits, cont, top_k)

    def _decode_all_logits(self, tokens: list[int]) -> npt.NDArray[np.float32]:
        """Decode ``tokens`` after what is in the cache, keeping every position's logits."""
        llm = self._llm
        n_past = llm.n_tokens
        llm._batch.set_batch(batch=tokens, n_past=n_past, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.input_ids[n_past:n_past + len(tokens)] = tokens
        llm.n_tokens += len(tokens)
        flat = np.ctypeslib.as_array(self._lc.llama_get_logits(llm.ctx),
                                     shape=(len(tokens) * llm.n_vocab(),))
        return flat.reshape(len(tokens), llm.n_vocab()).copy()

    def topk_trace(self, prompt_ids: Sequence[int], output_ids: Sequence[int],
                   k: int) -> list[list[int]]:
        """The engine's top-``k`` next-token IDs at every position of ``output_ids``
        (teacher-forced: the given tokens are fed, whatever the model would pick). Used
        by baselines to tell a near-tie flip from a real divergence."""
        llm, lc = self._llm, self._lc
        llm.reset()  # type: ignore[no-untyped-call]
        llm.eval(list(prompt_ids))
        n_vocab = llm.n_vocab()
        out: list[list[int]] = []
        for i, tok in enumerate(output_ids):
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(n_vocab,))
            top = np.argpartition(-logits, k)[:k]
            out.append([int(t) for t in top[np.argsort(-logits[top], kind="stable")]])
            if i + 1 < len(output_ids):
                llm.eval([tok])
        llm.reset()  # type: ignore[no-untyped-call]
        return out

    def _stop_cut(self, out: list[int], prompt_ids: list[int],
                  stops: Sequence[str]) -> str | None:
        """The text cut before the first stop string, or None when none appeared."""
        text = self._llm.detokenize(out, prev_tokens=prompt_ids).decode("utf-8", "replace")
        hits = [i for i in (text.find(s) for s in stops) if i >= 0]
        return text[: min(hits)] if hits else None


load = LlamaCppEngine.load  # the module's ``load``: the class's own
resolve_model = LlamaCppEngine.resolve_model
check_args = LlamaCppEngine.check_args
