"""The engine seam: the one base class every engine adapter extends.

An engine is loaded once, stays resident, and turns a batch of
:class:`GenerationRequest` into :class:`GenerationResult` in the same order.
Timing is taken *inside* the adapter as tokens arrive (``time.perf_counter``),
because only the adapter sees token boundaries; everything derived from the
timestamps (TTFT, steady decode, TPOT) lives in :mod:`abgate.metrics`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from abgate.engines.args import ArgSpec
from abgate.errors import AbgateError, UsageError

FinishReason = Literal["stop", "length", "error"]
ScoringMethod = Literal["full", "top_k"]
OnResult = Callable[["GenerationResult"], None]
Message = dict[str, str]  # a chat message, as the OpenAI chat API has it: role, content


def content_chars(messages: Sequence[Message]) -> int:
    """The characters of the messages' contents (what a chat template renders)."""
    return sum(len(m["content"]) for m in messages)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling. ``temperature == 0`` means greedy (argmax)."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    seed: int = 0
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # benchmarks decode exactly max_tokens

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
            "stop": list(self.stop),
            "ignore_eos": self.ignore_eos,
        }


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt: chat ``messages`` (templated by the engine), raw ``prompt`` text,
    or exact ``prompt_token_ids``. Exactly one must be given."""

    id: str
    params: SamplingParams
    messages: tuple[Message, ...] | None = None
    prompt: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.messages, self.prompt, self.prompt_token_ids)]
        if sum(given) != 1:
            raise ValueError(
                "GenerationRequest needs exactly one of messages, prompt, prompt_token_ids")


@dataclass
class GenerationResult:
    """What an engine returns for one request.

    Times are ``time.perf_counter()`` seconds taken by the adapter: ``t_submit`` when
    the request was handed to the engine, ``t_first_token``/``t_last_token`` when the
    first/last output token became available, ``token_times`` one entry per output
    token when the engine streams. ``engine_timings`` holds the engine's own counters
    where it exposes them (e.g. llama.cpp's perf context), for fidelity checks.
    """

    request_id: str
    text: str
    finish_reason: FinishReason
    prompt_tokens: int
    output_tokens: int
    output_token_ids: list[int] | None
    t_submit: float
    t_first_token: float | None
    t_last_token: float | None
    prompt_token_ids: list[int] | None = None
    token_times: list[float] | None = None
    error: str | None = None
    engine_timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def failed(cls, request_id: str, t_submit: float, error: str,
               engine_timings: dict[str, float] | None = None) -> GenerationResult:
        """A request that produced nothing: an error sample, never a wrong answer."""
        return cls(request_id=request_id, text="", finish_reason="error", prompt_tokens=0,
                   output_tokens=0, output_token_ids=None, t_submit=t_submit,
                   t_first_token=None, t_last_token=None, error=error,
                   engine_timings=engine_timings or {})


@dataclass(frozen=True)
class Capabilities:
    """What an engine can return, declared by the adapter (never guessed)."""

    token_ids: bool
    logprobs: bool
    streaming: bool
    chat_template: bool
    concurrent: bool = False
    engine_timings: bool = False
    # Teacher-forced scoring (``Engine.score``): "full" = log-probs over the whole
    # vocabulary at every position; "top_k" = only the k most likely; None = cannot.
    scoring: ScoringMethod | None = None


@dataclass(frozen=True)
class TokenScores:
    """Teacher-forced log-probabilities of a fixed continuation, one row per position.

    Row ``j`` is the engine's next-token distribution after the prompt and the first
    ``j`` continuation tokens, i.e. the distribution the ``j``-th continuation token was
    scored under. ``logprobs`` (positions x vocabulary, natural log) is there for the
    "full" method; ``top_ids``/``top_logprobs`` (positions x k, most likely first) and
    ``token_logprobs`` (the scored token's log-prob) always are.
    """

    method: ScoringMethod
    tokens: tuple[int, ...]
    token_logprobs: npt.NDArray[np.float32]
    top_ids: npt.NDArray[np.int64]
    top_logprobs: npt.NDArray[np.float32]
    logprobs: npt.NDArray[np.float32] | None = None

    @classmethod
    def from_top_k(cls, tokens: Sequence[int], tops: Sequence[Sequence[tuple[int, float]]],
                   token_logprobs: Sequence[float | None], k: int) -> TokenScores:
        """Scores from what a server reports per position: its top-``k`` ``(id,
        logprob)`` pairs and the scored token's log-prob (None where it was not
        reported: NaN here). Positions with fewer than ``k`` pairs are padded with ID
        -1 and log-prob -inf."""
        if not (len(tokens) == len(tops) == len(token_logprobs)):
            raise ValueError(f"{len(tokens)} tokens but {len(tops)} top-k lists and "
                             f"{len(token_logprobs)} token log-probs")
        ids = np.full((len(tokens), k), -1, dtype=np.int64)
        lps = np.full((len(tokens), k), -np.inf, dtype=np.float32)
        for row, pairs in enumerate(tops):
            ranked = sorted(pairs, key=lambda pair: (-pair[1], pair[0]))[:k]
            for col, (token, logprob) in enumerate(ranked):
                ids[row, col], lps[row, col] = token, logprob
        own = np.array([np.nan if lp is None else lp for lp in token_logprobs],
                       dtype=np.float32)
        return cls(method="top_k", tokens=tuple(int(t) for t in tokens), token_logprobs=own,
                   top_ids=ids, top_logprobs=lps)

    def as_top_k(self, k: int) -> TokenScores:
        """What a top-``k`` server would report of these scores: the ``k`` most likely
        tokens, and the scored token's log-prob only where it is among them."""
        k = min(k, self.top_ids.shape[1])
        ids, lps = self.top_ids[:, :k], self.top_logprobs[:, :k]
        own = [float(lp) if tok in row else None
               for tok, lp, row in zip(self.tokens, self.token_logprobs.tolist(), ids.tolist(),
                                       strict=True)]
        return TokenScores.from_top_k(
            self.tokens, [list(zip(i, lp, strict=True)) for i, lp in zip(ids.tolist(),
                                                                        lps.tolist(), strict=True)],
            own, k)


@dataclass(frozen=True)
class EngineInfo:
    """``describe()``: name, version and the effective configuration after load."""

    name: str
    version: str
    model: str
    effective_config: dict[str, Any]
    capabilities: Capabilities

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "model": self.model,
            "effective_config": self.effective_config,
            "capabilities": vars(self.capabilities).copy(),
        }


@dataclass(frozen=True)
class LoadedTensor:
    """One weight an engine holds after load: its dtype as held, its logical shape and
    how to read it, dequantized, as a float32 numpy array (read on demand)."""

    dtype: str
    shape: tuple[int, ...]
    read: Callable[[], Any]


class Engine(ABC):
    """The base class every engine adapter extends. Construct = load; it stays resident.

    Four members are the adapter's to write (``generate``, ``tokenize``,
    ``render_prompt``, ``describe``); every optional feature has an answer here, so
    callers never probe an engine for one: an engine that cannot score raises on
    ``score`` (and says ``capabilities.scoring = None``), one that cannot turn token IDs
    back into text answers None from ``detokenize``, and so on."""

    capabilities: Capabilities
    #: Set by ``close()`` of engines that start processes: the verified-cleanup evidence
    #: (no surviving processes, port free, GPU memory back) that the record keeps.
    cleanup_evidence: dict[str, Any] | None = None
    #: Env the engine's own processes were started with beyond abgate's (vLLM and
    #: launched servers: NVLink multicast off, :mod:`abgate.engines.shared.multicast`); the
    #: runner applies it around work on the engine, so the env snapshot records it.
    process_env: Mapping[str, str] = {}

    # The engine as the registry sees it before anything loads: class attributes and
    # classmethods, so the class is the one object the registry maps a name to.
    #: The engine's name (``--engine``).
    name: ClassVar[str] = ""
    #: What ``--engine-arg`` accepts.
    arg_specs: ClassVar[Mapping[str, ArgSpec]] = {}
    #: It runs in abgate's process (two arms of an A/B may then interleave in one).
    in_process: ClassVar[bool] = False
    #: The importable packages it needs, ``(import name, install hint)``, checked
    #: before load.
    packages: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        """The model to load, checked (exit 2 before any load); by default as given."""
        if not model:
            raise UsageError(f"engine {cls.name!r} needs --model")
        return model

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        """Cross-argument rules on the typed engine args, still before load: by default
        none, each arg checked alone by its ``ArgSpec``."""
        return None

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """The engine's options (endpoints, concurrency, ...): by default it takes none."""
        if options:
            raise UsageError(f"engine {cls.name!r} takes no engine options "
                             f"(got {', '.join(options)})")

    @classmethod
    def check_packages(cls) -> None:
        """Refuse in one line, before any load, when a package the engine needs is not
        installed (a module already imported, e.g. a test's stand-in, counts)."""
        for module, hint in cls.packages:
            if module not in sys.modules and importlib.util.find_spec(module) is None:
                raise UsageError(f"engine {cls.name!r} needs the package {module!r}: {hint}")

    @classmethod
    @abstractmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> Engine:
        """The resident engine (``options``: engine-level settings that are not engine
        args; ``run_dir``: where the engine may keep logs)."""

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        """Run a batch; results come back in request order, and ``on_result`` is called
        with each result the moment it finishes (completion order), so the runner can
        record it at once. A request that fails returns ``finish_reason="error"`` with
        ``error`` set; it does not raise. Engines that run requests concurrently bound
        their own in-flight window."""

    @abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """The engine's own tokenizer (no special tokens added)."""

    @abstractmethod
    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        """The exact prompt token IDs the engine would feed for chat ``messages``."""

    @abstractmethod
    def describe(self) -> EngineInfo: ...

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        """Teacher-forced scoring of ``continuation`` after ``prompt_token_ids`` (engines
        whose ``capabilities.scoring`` is None raise AbgateError)."""
        raise AbgateError(f"engine {type(self).__name__} cannot score teacher-forced "
                          "sequences (capabilities.scoring = None)")

    def processes(self) -> list[int]:
        """PIDs of the processes that run this engine, root first: this process for an
        in-process engine (the default; plus any workers it forked), a launched server's
        process tree, nothing for a remote endpoint. Provenance reads their mapped
        libraries and resources from these, and only these."""
        return [os.getpid()]

    def close(self) -> None:
        """Release everything. Engines that start processes verify the cleanup and
        leave the evidence in :attr:`cleanup_evidence`. The default holds nothing."""
        return None

    def detokenize(self, ids: Sequence[int]) -> str | None:
        """The text of token ``ids``; None where the engine cannot say (the default)."""
        return None

    def loaded_weights(self) -> dict[str, LoadedTensor] | None:
        """The weights as loaded (name -> :class:`LoadedTensor`, each read one at a time
        as float32); None where the engine cannot expose them (the default)."""
        return None

    def topk_trace(self, prompt_ids: Sequence[int], output_ids: Sequence[int],
                   k: int) -> list[list[int]] | None:
        """The engine's top-``k`` next-token IDs at every position of ``output_ids``
        (teacher-forced); None where the engine cannot trace them (the default).
        Baselines use it to tell a near-tie flip from a real divergence."""
        return None

    def keep_prompt_states(self, budget_bytes: int = 512 * 2**20) -> bool:
        """Keep each request's prompt state (up to ``budget_bytes``) so that ``score``
        restores it instead of prefilling again. True where the engine does; the
        default keeps nothing and answers False."""
        return False

    @property
    def prompts_restored(self) -> int | None:
        """How many ``score`` calls restored a kept prompt; None for an engine that
        keeps none (the default)."""
        return None

    @property
    def text_stable(self) -> Callable[[list[int]], bool] | None:
        """For engines that can only be sent text: the check that a token-ID prompt
        survives the text round trip (bench prompts are chosen so that it does); None
        where token IDs are sent as they are (the default)."""
        return None


def one_at_a_time(requests: Sequence[GenerationRequest], on_result: OnResult | None,
                  prompt_ids: Callable[[GenerationRequest], list[int]],
                  decode: Callable[[GenerationRequest, list[int], float], GenerationResult]
                  ) -> list[GenerationResult]:
    """``generate`` for an in-process engine that serves one request at a time: each
    request's clock starts at submit, its prompt is resolved and decoded, and a failure
    becomes that request's error sample (one failed request must not end the run);
    ``on_result`` gets each result as it finishes."""
    results = []
    for req in requests:
        t_submit = time.perf_counter()
        try:
            result = decode(req, prompt_ids(req), t_submit)
        except Exception as exc:
            result = GenerationResult.failed(req.id, t_submit, f"{type(exc).__name__}: {exc}")
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
