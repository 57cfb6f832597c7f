"""One sample record: an (item, seed) pair's prompt, output, timings and score."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.engines.base import GenerationResult
from abgate.errors import AbgateError, UsageError
from abgate.metrics import request_timing
from abgate.records.sections import Number, Section
from abgate.runner import records as rec
from abgate.scoring.extract import Extraction, extract_integer
from abgate.scoring.health import SampleHealth, sample_health
from abgate.scoring.numbers import format_int
from abgate.suites import Item

WARMUP_PREFIX = "warmup:"  # a warm-up sample's key: the prefix, then the (item, seed) key


class SamplePrompt(Section):
    messages: list[dict[str, Any]] | None = None
    sha256: str | None = None
    tokens: int | None = None


class SampleOutput(Section):
    text: str | None = None
    token_ids: list[int] | None = None
    tokens: int | None = None
    sha256: str | None = None


class SampleHealthRecord(Section):
    """A sample's output health (``scoring.health.sample_health``), its fields in the
    order it writes them."""

    correct: bool | None = None
    invalid: bool | None = None
    invalid_reason: str | None = None
    truncated: bool | None = None
    natural_stop: bool | None = None
    error: bool | None = None
    empty: bool | None = None
    replacement_chars: int | None = None
    control_chars: int | None = None
    output_tokens: int | None = None
    seq_rep_4: Number | None = None
    seq_rep_4_words: Number | None = None
    nul_chars: int | None = None


class SampleExtraction(Section):
    """The answer extracted from the output (``scoring.extract.Extraction``); a value
    too long for ``json`` is its exact decimal text."""

    value: int | str | None = None
    source: str | None = None
    reason: str | None = None
    span: str | None = None


class Sample(Section):
    """One ``samples.jsonl`` line of a run or an A/B arm: what :func:`build_sample`
    writes (every field set, in the order of the line) and what :func:`load_samples`
    reads leniently (every field optional: :func:`checked_samples` is the strict check
    a resume makes)."""

    key: str | None = None
    item_id: str | None = None
    seed: int | None = None
    warmup: bool = False
    finished_at: Number | None = None
    prompt: SamplePrompt = SamplePrompt()
    output: SampleOutput = SampleOutput()
    finish_reason: str | None = None
    error: str | None = None
    timing: dict[str, Any] = {}  # metrics.request_timing: numbers, None where unmeasured
    token_times_ms: list[Number] | None = None
    engine_timings: dict[str, Any] | None = None
    reference: int | str | None = None
    extracted: SampleExtraction | None = None
    correct: bool | None = None
    health: SampleHealthRecord = SampleHealthRecord()

    @property
    def measured(self) -> bool:
        return not self.warmup

    @property
    def failed(self) -> bool:
        """An engine error (its finish reason or its health says so)."""
        return self.finish_reason == "error" or bool(self.health.error)

    def output_sha(self) -> str | None:
        """The output tokens' SHA-256, from the record or its token IDs."""
        return self.output.sha256 or ids_sha256(self.output.token_ids)


def load_samples(path: Path) -> list[Sample]:
    """The sample lines of ``path`` as :class:`Sample` models (a torn last line is
    left out); a line of the wrong shape is a one-line UsageError naming ``path:line``."""
    out = []
    try:
        lines = rec.read_sample_lines(path)
    except AbgateError as exc:
        raise UsageError(str(exc)) from None
    for n, line in lines:
        try:
            out.append(Sample.model_validate(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UsageError(f"{path}:{n}: {where}: {first['msg']}") from None
    return out


def sample_key(item_id: str, seed: int) -> str:
    return f"{item_id}#{seed}"


def ids_sha256(ids: Sequence[int] | None) -> str | None:
    if ids is None:
        return None
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def _extraction_record(extraction: Extraction | None) -> SampleExtraction | None:
    """The extraction as JSON; an integer too long for ``json`` (a model looping on digits)
    is stored as its exact decimal text."""
    if extraction is None:
        return None
    d = extraction.to_dict()
    if isinstance(d["value"], int) and d["value"].bit_length() > 10_000:
        d["value"] = format_int(d["value"])
    return SampleExtraction.model_validate(d)


def _scored(item: Item, result: GenerationResult
            ) -> tuple[Extraction | None, SampleHealth, SampleExtraction | None]:
    """The extraction, health and (a text-scored item) the match record of one output."""
    error = result.finish_reason == "error"
    if item.scorer is not None:
        span = None if error else item.scorer.match(result.text)
        health = sample_health(result.text, result.output_token_ids, result.output_tokens,
                               result.finish_reason, extract_integer(""), None,
                               matched=span is not None)
        record = None if error else SampleExtraction(
            value=None, source=item.scorer.kind, span=span,
            reason=None if span is not None else "no_match")
        return None, health, record
    extraction = None if error else extract_integer(result.text)
    health = sample_health(result.text, result.output_token_ids, result.output_tokens,
                           "error" if error else result.finish_reason,
                           extraction or extract_integer(""), item.answer)
    return extraction, health, None


def build_sample(item: Item, seed: int, messages: Sequence[dict[str, str]],
                 result: GenerationResult, *, warmup: bool = False) -> Sample:
    """The ``samples.jsonl`` line for one finished request, validated (a warm-up's key
    has :data:`WARMUP_PREFIX`)."""
    timing = request_timing(result)
    extraction, health, extracted = _scored(item, result)
    token_offsets = None
    if result.token_times:
        token_offsets = [round((t - result.t_submit) * 1000.0, 4) for t in result.token_times]
    key = (WARMUP_PREFIX if warmup else "") + sample_key(item.id, seed)
    return Sample(
        key=key, item_id=item.id, seed=seed, warmup=warmup, finished_at=time.time(),
        prompt=SamplePrompt(messages=list(messages),
                            sha256=ids_sha256(result.prompt_token_ids),
                            tokens=result.prompt_tokens),
        output=SampleOutput(text=result.text, token_ids=result.output_token_ids,
                            tokens=result.output_tokens,
                            sha256=ids_sha256(result.output_token_ids)),
        finish_reason=result.finish_reason, error=result.error, timing=timing.to_dict(),
        token_times_ms=token_offsets, engine_timings=result.engine_timings,
        reference=item.answer if item.scorer is None else item.scorer.answer,
        extracted=extracted if extracted is not None else _extraction_record(extraction),
        correct=health.correct, health=SampleHealthRecord.model_validate(health.to_dict()))


# What a resume and a summary rely on in every sample line, and its type.
REQUIRED = {"key": str, "item_id": str, "seed": int, "prompt": dict, "output": dict,
            "finish_reason": str, "timing": dict, "health": dict}


def checked_samples(path: Path, lines: Sequence[tuple[int, dict[str, Any]]],
                    expected: Collection[str]) -> list[dict[str, Any]]:
    """The samples of ``path`` after checking every line against the run's own
    (item, seed) keys ``expected``: a line without a field a sample needs, of another
    run (a key not in the spec, a key that does not match its item and seed) or
    repeating a key is refused in one line naming ``path:line``. Warm-up lines (an A/B
    re-warms on every resume) may repeat."""
    first_line: dict[str, int] = {}
    for n, s in lines:
        where = f"{path}:{n}"
        for name, kind in REQUIRED.items():
            value = s.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise UsageError(f"{where}: not a sample of abgate's ({name!r} is missing or "
                                 f"not {kind.__name__}); the file was edited or damaged")
        if s.get("warmup"):
            continue
        key = s["key"]
        if key != sample_key(s["item_id"], s["seed"]) or key not in expected:
            raise UsageError(f"{where}: sample {key[:80]!r} is not one of this run's "
                             "(item, seed) pairs (a line of another run?); the file was "
                             "edited or mixed")
        if key in first_line:
            raise UsageError(f"{where}: sample {key[:80]!r} is recorded twice (first at line "
                             f"{first_line[key]}); the file was edited or written twice")
        first_line[key] = n
    return [s for _, s in lines]
