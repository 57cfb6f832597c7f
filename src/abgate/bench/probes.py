"""Health probes: three small tasks, each of which must end with a natural EOS *and* be
answered correctly to pass.

- ``arithmetic``: add two two-digit numbers; the last integer in the answer must be
  the sum.
- ``copy``: repeat a random record (ID, name, city, amount) verbatim; the record must
  appear character for character in the answer.
- ``needle``: retrieve a key planted at a chosen depth (0 = start, 1 = end) of a long
  filler context of a chosen length in tokens; the key must appear in the answer.

Probes are sent as chat messages (the engine applies its template), greedy, with EOS
honoured and a token limit; hitting the limit is a failure (no natural EOS). Results
say which condition failed, with the output token count, so a small model's failures
are reported as they are.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from abgate.bench.prompts import Tokenize, filler_sentences, join_paragraphs
from abgate.engines.base import Engine, GenerationRequest, GenerationResult, Message, SamplingParams
from abgate.errors import UsageError
from abgate.records.bench_sections import ProbeRecord

Match = Literal["last_integer", "contains"]
_INT = re.compile(r"-?\d[\d,]*")
_NAMES = ("Mara Velt", "Jonas Okafor", "Ines Albrecht", "Tomas Reyes", "Lena Kowalski",
          "Arjun Mehta", "Sofia Lindqvist", "Peter Hale")
_CITIES = ("Lisbon", "Tallinn", "Porto", "Ghent", "Bergen", "Leeds", "Turin", "Graz")
_ALNUM = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True)
class Probe:
    """One probe: the chat messages, the expected answer and how to check it."""

    name: str
    messages: tuple[Message, ...]
    expected: str
    match: Match
    max_tokens: int
    params: dict[str, Any] = field(default_factory=dict)

    def is_correct(self, text: str) -> bool:
        if self.match == "contains":
            return self.expected in text
        numbers = _INT.findall(text)
        return bool(numbers) and numbers[-1].replace(",", "") == self.expected


# One probe's result as :func:`evaluate` makes it (every field given) and as a bench
# summary and a baseline record hold it.
ProbeResult = ProbeRecord


class ProbeLine(BaseModel):
    """A bench's ``samples.jsonl`` line for one probe: the result's fields between the
    line's key and the output's token IDs and error."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: Literal["probe"] = "probe"
    key: str
    warmup: bool = False
    finished_at: float
    name: str
    passed: bool
    natural_eos: bool
    correct: bool
    reason: str
    finish_reason: str
    prompt_tokens: int
    output_tokens: int
    expected: str
    output_text: str
    params: dict[str, Any]
    output_token_ids: list[int] | None = None
    error: str | None = None

    def produced_tokens(self) -> int:
        """The output tokens, as progress counts them."""
        return self.output_tokens


def _code(rnd: random.Random, n: int) -> str:
    return "".join(rnd.choice(_ALNUM) for _ in range(n))


def arithmetic_probe(seed: int = 0) -> Probe:
    rnd = random.Random(f"arithmetic:{seed}")
    a, b = rnd.randint(12, 49), rnd.randint(12, 49)
    msg = f"What is {a} + {b}? Answer with the number only."
    return Probe("arithmetic", ({"role": "user", "content": msg},), str(a + b),
                 "last_integer", 32, {"a": a, "b": b})


def copy_probe(seed: int = 0) -> Probe:
    rnd = random.Random(f"copy:{seed}")
    record = (f"ID {_code(rnd, 4)}-{_code(rnd, 4)}; name {rnd.choice(_NAMES)}; "
              f"city {rnd.choice(_CITIES)}; amount {rnd.randint(100, 9999)}")
    msg = ("Copy the following record exactly, character for character, and write "
           f"nothing else.\n\n{record}")
    return Probe("copy", ({"role": "user", "content": msg},), record, "contains", 64)


def needle_probe(tokenize: Tokenize, context_tokens: int = 1024, depth: float = 0.5,
                 seed: int = 0) -> Probe:
    """A key planted at ``depth`` of a user message of about ``context_tokens`` tokens
    (filler sized with the engine's tokenizer, to the nearest sentence; the chat template
    adds its own tokens, and the result reports the exact prompt length)."""
    if not 0.0 <= depth <= 1.0:
        raise UsageError(f"--probe-depth must be within 0..1, got {depth}")
    if context_tokens < 64:
        raise UsageError(f"--probe-len must be >= 64 tokens, got {context_tokens}")
    rnd = random.Random(f"needle:{seed}")
    key = f"{_code(rnd, 3)}-{rnd.randint(1000, 9999)}"
    needle = f"The secret key is {key}."
    question = "What is the secret key mentioned in the text above? Answer with the key only."
    trial = 64
    per_sentence = len(tokenize(join_paragraphs(filler_sentences(trial, seed)))) / trial
    fixed = len(tokenize(f"{needle}\n\n{question}"))
    n = max(2, round((context_tokens - fixed) / per_sentence))
    sentences = filler_sentences(n, seed)
    sentences.insert(round(depth * n), needle)
    msg = f"{join_paragraphs(sentences)}\n\n{question}"
    return Probe("needle", ({"role": "user", "content": msg},), key, "contains", 32,
                 {"context_tokens": context_tokens, "depth": depth})


DEFAULT_PROBE_NAMES = ("arithmetic", "copy", "needle")  # what default_probes returns


def default_probes(tokenize: Tokenize, *, needle_len: int = 1024, needle_depth: float = 0.5,
                   seed: int = 0) -> list[Probe]:
    return [arithmetic_probe(seed), copy_probe(seed),
            needle_probe(tokenize, needle_len, needle_depth, seed)]


def evaluate(probe: Probe, result: GenerationResult) -> ProbeResult:
    """Pass = natural EOS and a correct answer; ``reason`` names what failed."""
    natural = result.finish_reason == "stop"
    correct = result.finish_reason != "error" and probe.is_correct(result.text)
    if result.finish_reason == "error":
        reason = f"engine error: {result.error}"
    elif not natural:
        reason = f"no natural EOS ({result.finish_reason} at {result.output_tokens} tokens)"
    else:
        reason = "ok" if correct else "wrong answer"
    if not correct and not natural and result.finish_reason != "error":
        reason += ", wrong answer"
    return ProbeResult(name=probe.name, passed=natural and correct, natural_eos=natural,
                       correct=correct, reason=reason, finish_reason=result.finish_reason,
                       prompt_tokens=result.prompt_tokens, output_tokens=result.output_tokens,
                       expected=probe.expected, output_text=result.text,
                       params=dict(probe.params))


def probe_request(probe: Probe, seed: int = 0) -> GenerationRequest:
    params = SamplingParams(max_tokens=probe.max_tokens, temperature=0.0, top_k=0, seed=seed)
    return GenerationRequest(id=f"probe:{probe.name}", params=params, messages=probe.messages)


def check_fits(engine: Engine, probes: Sequence[Probe], n_ctx: int | None) -> None:
    """Refuse, before running anything, a probe whose prompt + limit exceeds the context."""
    if n_ctx is None:
        return
    for p in probes:
        need = len(engine.render_prompt(p.messages)) + p.max_tokens
        if need > n_ctx:
            raise UsageError(f"probe {p.name!r} needs {need} tokens, more than the context "
                             f"(n_ctx={n_ctx}); lower --probe-len")


def run_probes(engine: Engine, probes: Sequence[Probe], n_ctx: int | None = None,
               on_sample: Callable[[ProbeLine], None] | None = None) -> list[ProbeResult]:
    """Run each probe once; ``on_sample`` gets the ``samples.jsonl`` line of each."""
    check_fits(engine, probes, n_ctx)
    out = []
    for p in probes:
        result = engine.generate([probe_request(p)])[0]
        pr = evaluate(p, result)
        out.append(pr)
        if on_sample is not None:
            on_sample(ProbeLine(kind="probe", key=f"probe:{p.name}", warmup=False,
                                finished_at=time.time(), **pr.to_dict(),
                                output_token_ids=result.output_token_ids,
                                error=result.error))
    return out
