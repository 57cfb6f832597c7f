"""One sample record: an (item, seed) pair's prompt, output, timings and score."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.engines.base import GenerationResult
from abgate.errors import AbgateError, UsageError
from abgate.metrics import request_timing
from abgate.records.samples import (
    WARMUP_PREFIX,
    Sample,
    SampleExtraction,
    SampleHealthRecord,
    SampleOutput,
    SamplePrompt,
    ids_sha256,
    sample_key,
)
from abgate.runner import records as rec
from abgate.schema import first_error
from abgate.scoring.extract import Extraction, extract_integer
from abgate.scoring.health import sample_health
from abgate.scoring.numbers import format_int
from abgate.suites import Item


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
            first = first_error(exc)
            raise UsageError(f"{path}:{n}: {first.dotted}: {first.message}") from None
    return out


def _extraction_record(extraction: Extraction | None) -> SampleExtraction | None:
    """The extraction as recorded; an integer too long for ``json`` (a model looping on
    digits) is stored as its exact decimal text."""
    if extraction is None:
        return None
    value: int | str | None = extraction.value
    if isinstance(value, int) and value.bit_length() > 10_000:
        value = format_int(value)
    return SampleExtraction(value=value, source=extraction.source, reason=extraction.reason,
                            span=extraction.span)


def _scored(item: Item, result: GenerationResult
            ) -> tuple[Extraction | None, SampleHealthRecord, SampleExtraction | None]:
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
        finish_reason=result.finish_reason, error=result.error, timing=timing,
        token_times_ms=token_offsets, engine_timings=result.engine_timings,
        reference=item.answer if item.scorer is None else item.scorer.answer,
        extracted=extracted if extracted is not None else _extraction_record(extraction),
        correct=health.correct, health=health)


# What a resume and a summary rely on in every sample line, and its type.
REQUIRED = {"key": str, "item_id": str, "seed": int, "prompt": dict, "output": dict,
            "finish_reason": str, "timing": dict, "health": dict}


def checked_samples(path: Path, lines: Sequence[tuple[int, dict[str, Any]]],
                    expected: Collection[str]) -> list[Sample]:
    """The samples of ``path`` after checking every line against the run's own
    (item, seed) keys ``expected``: a line without a field a sample needs, of another
    run (a key not in the spec, a key that does not match its item and seed) or
    repeating a key is refused in one line naming ``path:line``. Warm-up lines (an A/B
    re-warms on every resume) may repeat."""
    first_line: dict[str, int] = {}
    samples = []
    for n, s in lines:
        where = f"{path}:{n}"
        for name, kind in REQUIRED.items():
            value = s.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise UsageError(f"{where}: not a sample of abgate's ({name!r} is missing or "
                                 f"not {kind.__name__}); the file was edited or damaged")
        try:
            sample = Sample.of(s, where)
        except AbgateError as exc:  # a field of the wrong type: edited or damaged
            raise UsageError(str(exc)) from None
        samples.append(sample)
        if sample.warmup:
            continue
        key = str(sample.key)
        if key != sample_key(str(sample.item_id), int(sample.seed or 0)) or key not in expected:
            raise UsageError(f"{where}: sample {key[:80]!r} is not one of this run's "
                             "(item, seed) pairs (a line of another run?); the file was "
                             "edited or mixed")
        if key in first_line:
            raise UsageError(f"{where}: sample {key[:80]!r} is recorded twice (first at line "
                             f"{first_line[key]}); the file was edited or written twice")
        first_line[key] = n
    return samples
