"""An in-process fake engine (``--engine fake``) for testing workflow logic without a
real model, the way httpx's ``MockTransport`` stands in for a network: deterministic,
instant, and able to misbehave on request.

The "model" is a function of the prompt. Tokens are the prompt's UTF-8 bytes (IDs
0-255; 256 is BOS, 257 EOS). For each prompt there is a target reply, ``The answer is
N.`` followed by EOS, where N solves the synthetic suite's story problems (the last
user message; for a fraction ``1 - accuracy`` of prompts, chosen by hash, N is one
off). The next-token logits at position ``j`` of the reply are seeded noise (from the
engine's ``seed``, the prompt and ``j``) plus ``margin`` on the target's ``j``-th token,
plus ``perturb`` times a second noise field: ``perturb=0`` between two arms is an A/A
(identical outputs, KL exactly 0), a small ``perturb`` a tiny numeric change, a large
one (past ``margin``) changed outputs and wrong answers. Generation samples from these
logits (greedy: the argmax), and ``score`` returns the same logits, so scores and
outputs agree.

Timings run on a simulated clock: a request's first token comes ``ttft_ms`` after it is
submitted, each further one ``tpot_ms`` later, both scaled by a seeded ``jitter``;
nothing sleeps, so tests never depend on wall time; a host's own overhead per request
(``ABGATE_FAKE_HOST_MS``: a slower host of a fleet) is added to the TTFT, reported as
``host_ms``. Faults: ``error_rate`` (a seeded fraction of requests end as error
samples), ``crash_after`` N requests in this process (``crash=interrupt`` raises
KeyboardInterrupt as a Ctrl-C would, ``crash=kill`` sends this process SIGKILL),
``hang_at`` (that request sleeps ``hang_s`` real seconds).

A test states any other behaviour inline with a **handler**, as httpx's
``MockTransport(handler)`` does: :func:`set_handler` installs a callable that sees each
request as a :class:`FakeCall` (after the faults above) and returns a result of its own
(``call.reply("text")``, ``call.reply(token_ids=[...])``, ``call.failed("why")``),
None for the model's own reply, or raises (an error sample; ``KeyboardInterrupt`` stops
the run); a slow request is a handler that sleeps. The handler belongs to this process
(``tests/support/fake.py: use_handler`` sets it for a block).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.random  # noqa: F401  (loaded with the engine: an arm's mapped libraries
import numpy.typing as npt  # never depend on whether another arm generated first)

import abgate
from abgate.engines.args import ArgSpec
from abgate.engines.base import (
    Capabilities,
    Engine,
    EngineInfo,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    Message,
    OnResult,
    SamplingParams,
    TokenScores,
    one_at_a_time,
)
from abgate.engines.shared.logits import scores_from_logits
from abgate.errors import UsageError

log = logging.getLogger("abgate.engine.fake")

NAME = "fake"
BOS, EOS, VOCAB = 256, 257, 258

_SPECS = [
    ArgSpec("n_ctx", int, "context length in tokens"),
    ArgSpec("seed", int, "the fake model's weights: another seed is another model"),
    ArgSpec("margin", float, "logit margin of the target token over the noise"),
    ArgSpec("perturb", float, "scale of a second noise field: the numeric change"),
    ArgSpec("accuracy", float, "fraction of prompts answered correctly (0-1)"),
    ArgSpec("ttft_ms", float, "simulated time to first token"),
    ArgSpec("tpot_ms", float, "simulated time per further output token"),
    ArgSpec("jitter", float, "relative spread of the simulated times (0-1)"),
    ArgSpec("error_rate", float, "fraction of requests that end as error samples (0-1)"),
    ArgSpec("crash_after", int, "crash after N requests in this process", nullable=True),
    ArgSpec("crash", str, "how to crash", choices={"interrupt": "interrupt", "kill": "kill"}),
    ArgSpec("hang_at", int, "the request (1-based, this process) that hangs", nullable=True),
    ArgSpec("hang_s", float, "how long the hanging request sleeps (real seconds)"),
    ArgSpec("scoring", str, "teacher-forced scoring: full, top_k or none",
            choices={"full": "full", "top_k": "top_k", "none": "none"}),
    ArgSpec("ignored", dict, "an override the engine accepts and drops (as vLLM drops an "
            "hf_overrides key the model does not read): nothing after the load shows it"),
    ArgSpec("config_override", dict, "an override that lands in the model config and that "
            "the model does not read (as vLLM's hf_overrides of a key transformers 5 moved): "
            "only the config's digest (hf_config_sha256) shows it"),
]
_UNREPORTED = frozenset({"ignored", "config_override"})  # taken, not reported after load
ARG_SPECS: Mapping[str, ArgSpec] = {s.name: s for s in _SPECS}
DEFAULTS: Mapping[str, Any] = {
    "n_ctx": 4096, "seed": 0, "margin": 8.0, "perturb": 0.0, "accuracy": 1.0,
    "ttft_ms": 20.0, "tpot_ms": 5.0, "jitter": 0.05, "error_rate": 0.0, "crash_after": None,
    "crash": "interrupt", "hang_at": None, "hang_s": 3600.0, "scoring": "full"}
_FRACTIONS, HOST_MS = ("accuracy", "jitter", "error_rate"), "ABGATE_FAKE_HOST_MS"


@dataclass(frozen=True)
class FakeCall:
    """One request as a handler sees it: the request, its prompt IDs, its number in this
    engine (1-based) and the engine; ``reply`` and ``failed`` build a result on the
    engine's simulated clock."""

    request: GenerationRequest
    prompt_ids: list[int]
    number: int
    engine: FakeEngine
    t_submit: float

    def reply(self, text: str | None = None, *, token_ids: Sequence[int] | None = None,
              finish: FinishReason = "stop") -> GenerationResult:
        """A result of ``text`` (its byte tokens) or of ``token_ids``."""
        out = list(token_ids) if token_ids is not None else self.engine.tokenize(text or "")
        shown = text if text is not None else self.engine.detokenize(out)
        return self.engine.result(self.request, self.prompt_ids, self.t_submit, out, finish,
                                  shown)

    def failed(self, error: str) -> GenerationResult:
        """An error sample of this request."""
        return GenerationResult.failed(self.request.id, self.t_submit, error)


Handler = Callable[[FakeCall], "GenerationResult | None"]
_handler: Handler | None = None


def set_handler(handler: Handler | None) -> Handler | None:
    """Install ``handler`` for every fake engine in this process (None: none); returns
    the one it replaces."""
    global _handler
    previous, _handler = _handler, handler
    return previous


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def _words(ids: Sequence[int]) -> list[int]:
    """Four 32-bit words of the SHA-256 of ``ids``: a seed for numpy's generators."""
    digest = hashlib.sha256(",".join(map(str, ids)).encode()).digest()
    return [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]


Step = Callable[[int, re.Match[str]], int]
_STEPS: list[tuple[re.Pattern[str], Step]] = [  # the synthetic suite's sentences
    (re.compile(r"buys (\d+) more"), lambda t, m: t + int(m[1])),
    (re.compile(r"gets (\d+) packs with (\d+)"), lambda t, m: t + int(m[1]) * int(m[2])),
    (re.compile(r"gives (\d+)"), lambda t, m: t - int(m[1])),
    (re.compile(r"collection doubles"), lambda t, m: t * 2),
    (re.compile(r"collection triples"), lambda t, m: t * 3),
    (re.compile(r"grows (\d+) times"), lambda t, m: t * int(m[1])),
    (re.compile(r"among (\d+) boxes"), lambda t, m: t // int(m[1])),
]


def solve(question: str) -> int:
    """The answer to a synthetic story problem (its last number for any other text, 0
    with none): the fake model "knows" grade-school arithmetic."""
    start = re.search(r"has (\d+) ", question)
    if start is None:
        numbers = re.findall(r"\d+", question)
        return int(numbers[-1]) if numbers else 0
    total = int(start[1])
    for sentence in re.split(r"(?<=\.)\s+", question[start.end():]):
        for pattern, op in _STEPS:
            m = pattern.search(sentence)
            if m:
                total = op(total, m)
                break
    return total


class FakeEngine(Engine):
    """The fake model, resident in this process (see the module docstring)."""

    name = NAME
    arg_specs = ARG_SPECS
    in_process = True

    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        """Any name: the fake model is a function, identified by name and engine args."""
        return model or "fake"

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> FakeEngine:
        cls.check_options(options or {})
        return cls(model, args)

    def __init__(self, model: str, args: Mapping[str, Any]) -> None:
        host = float(os.environ.get(HOST_MS, 0) or 0)  # reported only when set
        cfg = {**DEFAULTS, **args, **({"host_ms": host} if host else {})}
        for key in _FRACTIONS:
            if not 0.0 <= cfg[key] <= 1.0:
                raise UsageError(f"engine arg {key!r} must be in [0, 1], got {cfg[key]!r}")
        self.cfg, self.model = cfg, model
        scoring = None if cfg["scoring"] == "none" else cfg["scoring"]
        self.capabilities = Capabilities(token_ids=True, logprobs=False, streaming=True,
                                         chat_template=True, scoring=scoring)
        self.served = 0  # requests started in this process
        self._clock = time.perf_counter()
        self._kept: set[tuple[int, ...]] | None = None
        # a prompt's seed words and target reply, asked once per token of its reply
        self._prompt_facts: dict[tuple[int, ...], tuple[list[int], list[int]]] = {}
        self._restored = 0

    # -- the protocol -------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return [BOS, *self.tokenize(text + "<|assistant|>\n")]

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        return one_at_a_time(requests, on_result, self._prompt_ids, self._decode)

    def describe(self) -> EngineInfo:
        return EngineInfo(name=NAME, version=abgate.__version__, model=self.model,
                          effective_config={**{k: v for k, v in self.cfg.items()
                                               if k not in _UNREPORTED}, "n_vocab": VOCAB,
                                            **self._config_digest()},
                          capabilities=self.capabilities)

    def _config_digest(self) -> dict[str, str]:
        """The model config's digest, as vLLM's effective config has it: present only
        when a ``config_override`` was given (the fake has no config otherwise)."""
        override = self.cfg.get("config_override")
        if not override:
            return {}
        text = json.dumps(override, sort_keys=True, default=str)
        return {"hf_config_sha256": hashlib.sha256(text.encode()).hexdigest()}

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        if self.capabilities.scoring is None:
            return super().score(prompt_token_ids, continuation, top_k)
        prompt, cont = list(prompt_token_ids), list(continuation)
        if not prompt or not cont:
            raise ValueError("scoring needs a non-empty prompt and continuation")
        if self._kept is not None and tuple(prompt) in self._kept:
            self._restored += 1
        logits = np.stack([self._logits(prompt, j) for j in range(len(cont))])
        scores = scores_from_logits(logits, cont, max(top_k, 1))
        return scores.as_top_k(top_k) if self.capabilities.scoring == "top_k" else scores

    def topk_trace(self, prompt_ids: Sequence[int], output_ids: Sequence[int],
                   k: int) -> list[list[int]]:
        prompt = list(prompt_ids)
        return [[int(t) for t in np.argsort(-self._logits(prompt, j), kind="stable")[:k]]
                for j in range(len(output_ids))]

    def keep_prompt_states(self, budget_bytes: int = 0) -> bool:
        self._kept = set()
        return True

    @property
    def prompts_restored(self) -> int | None:
        return None if self._kept is None else self._restored

    # -- the model ----------------------------------------------------------------------

    def target(self, prompt: Sequence[int]) -> list[int]:
        """The reply this prompt's logits peak on, EOS last."""
        text = self.detokenize(prompt)
        turns = text.split("<|user|>\n")
        question = turns[-1].split("<|assistant|>")[0]
        answer = solve(question)
        if _unit("accuracy", self.cfg["seed"], question) >= self.cfg["accuracy"]:
            answer += 1
        return [*self.tokenize(f"The answer is {answer}."), EOS]

    def _facts(self, prompt: list[int]) -> tuple[list[int], list[int]]:
        key = tuple(prompt)
        if key not in self._prompt_facts:
            if len(self._prompt_facts) >= 256:
                self._prompt_facts.clear()
            self._prompt_facts[key] = (_words(prompt), self.target(prompt))
        return self._prompt_facts[key]

    def _logits(self, prompt: list[int], j: int) -> npt.NDArray[np.float32]:
        words, target = self._facts(prompt)
        noise = np.random.default_rng([self.cfg["seed"], j, *words]).standard_normal(VOCAB)
        noise[target[j] if j < len(target) else EOS] += self.cfg["margin"]
        if self.cfg["perturb"]:
            extra = np.random.default_rng([self.cfg["seed"], j, 1, *words])
            noise += self.cfg["perturb"] * extra.standard_normal(VOCAB)
        return noise.astype(np.float32)

    def _pick(self, logits: npt.NDArray[np.float32], p: SamplingParams, prompt: list[int],
              j: int) -> int:
        if p.ignore_eos:
            logits = logits.copy()
            logits[EOS] = -np.inf
        if p.greedy:
            return int(np.argmax(logits))
        x = logits.astype(np.float64) / p.temperature
        order = np.argsort(-x, kind="stable")
        if p.top_k:
            order = order[:p.top_k]
        probs = np.exp(x[order] - x[order].max())
        probs /= probs.sum()
        if p.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p) + 1)
            order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
        rng = np.random.default_rng([p.seed, j, *self._facts(prompt)[0]])
        return int(rng.choice(order, p=probs))

    # -- requests -----------------------------------------------------------------------

    def _prompt_ids(self, req: GenerationRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            return self.render_prompt(req.messages)
        assert req.prompt is not None
        return [BOS, *self.tokenize(req.prompt)]

    def _faults(self, prompt: list[int], p: SamplingParams) -> str | None:
        """Crash or hang where asked; the error of an injected error sample, or None."""
        crash_after = self.cfg["crash_after"]
        if crash_after is not None and self.served >= crash_after:
            if self.cfg["crash"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise KeyboardInterrupt(f"fake engine: crash after {crash_after} requests")
        self.served += 1
        if self.cfg["hang_at"] == self.served:
            log.info("fake engine: request %d hangs for %.0f s", self.served, self.cfg["hang_s"])
            time.sleep(self.cfg["hang_s"])
        if _unit("error", self.cfg["seed"], prompt, p.seed) < self.cfg["error_rate"]:
            return "fake engine: injected error"
        return None

    def _decode(self, req: GenerationRequest, prompt: list[int],
                t_submit: float) -> GenerationResult:
        p = req.params
        if len(prompt) + p.max_tokens > self.cfg["n_ctx"]:
            raise ValueError(f"prompt ({len(prompt)} tokens) + max_tokens ({p.max_tokens}) "
                             f"exceeds the context (n_ctx={self.cfg['n_ctx']})")
        error = self._faults(prompt, p)
        t0 = max(t_submit, self._clock)
        if error is not None:
            return GenerationResult.failed(req.id, t0, error)
        handler = _handler
        if handler is not None:
            given = handler(FakeCall(req, prompt, self.served, self, t0))
            if given is not None:
                return given
        out, finish, text = self._tokens(prompt, p)
        return self.result(req, prompt, t0, out, finish, text)

    def result(self, req: GenerationRequest, prompt: list[int], t0: float, out: list[int],
               finish: FinishReason, text: str) -> GenerationResult:
        """The result of ``out`` for ``req``, its tokens timed on the simulated clock."""
        times = self._times(t0, prompt, len(out))
        self._clock = times[-1] if times else t0
        if self._kept is not None:
            self._kept.add(tuple(prompt))
        return GenerationResult(
            request_id=req.id, text=text, finish_reason=finish, prompt_tokens=len(prompt),
            output_tokens=len(out), output_token_ids=out, prompt_token_ids=prompt,
            t_submit=t0, t_first_token=times[0] if times else None,
            t_last_token=times[-1] if times else None, token_times=times)

    def _tokens(self, prompt: list[int], p: SamplingParams
                ) -> tuple[list[int], FinishReason, str]:
        out: list[int] = []
        while len(out) < p.max_tokens:
            tok = self._pick(self._logits(prompt, len(out)), p, prompt, len(out))
            if tok == EOS:
                return out, "stop", self.detokenize(out)
            out.append(tok)
            text = self.detokenize(out)
            hits = [i for i in (text.find(s) for s in p.stop) if i >= 0]
            if hits:
                return out, "stop", text[:min(hits)]
        return out, "length", self.detokenize(out)

    def _times(self, t0: float, prompt: list[int], n: int) -> list[float]:
        """Simulated token arrival times: TTFT, then TPOT per token, seeded jitter."""
        c, words = self.cfg, _words(prompt)
        spread = np.random.default_rng([c["seed"], 2, *words]).uniform(-1, 1, size=max(n, 1))
        steps = np.full(n, c["tpot_ms"], dtype=np.float64)
        if n:
            steps[0] = c["ttft_ms"] + c.get("host_ms", 0.0)
        steps = steps * (1.0 + c["jitter"] * spread[:n]) / 1000.0
        return [float(t) for t in t0 + np.cumsum(steps)]


load = FakeEngine.load  # the module's ``load``: the class's own
resolve_model = FakeEngine.resolve_model
