"""One ``samples.jsonl`` line of a run or an A/B arm, typed: an (item, seed) pair's
prompt, output, timings and score (:class:`Sample`). Built by
``runner.samples.build_sample``; read by the runner, the compare layer, the reports and
the ledger alike."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, ValidationError

from abgate.errors import AbgateError
from abgate.records.sections import Number, Section
from abgate.schema import first_error

WARMUP_PREFIX = "warmup:"  # a warm-up sample's key: the prefix, then the (item, seed) key


class RequestTiming(Section):
    """One request's speed figures (``metrics.request_timing``, docs/metrics.md), in the
    order they are written; None where undefined for the request (one output token: no
    steady decode). A sample imported from another tool may have none written (an
    lm-eval sample): then each is None and none is written back."""

    ttft_s: Number | None = None
    prefill_tps: Number | None = None
    decode_s: Number | None = None
    steady_decode_tps: Number | None = None
    tpot_ms: Number | None = None
    e2e_s: Number | None = None
    output_tps: Number | None = None

    def figure(self, name: str) -> Number | None:
        """One figure by its field name (a speed metric, ``runner.summary.SPEED_FIELDS``);
        None for a name that is no field."""
        found: Number | None = getattr(self, name) if name in type(self).model_fields else None
        return found


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
    timing: RequestTiming = Field(default_factory=RequestTiming)  # metrics.request_timing
    token_times_ms: list[Number] | None = None
    engine_timings: dict[str, Any] | None = None
    reference: int | str | None = None
    extracted: SampleExtraction | None = None
    correct: bool | None = None
    health: SampleHealthRecord = SampleHealthRecord()
    random_weights: bool | None = None  # a sample of an engine that says so (speed only)

    @classmethod
    def of(cls, sample: Sample | Mapping[str, Any], where: str = "sample") -> Sample:
        """``sample`` as the model (a parsed line read leniently; the model as it is); a
        field of the wrong type is one line naming ``where`` and the field."""
        if isinstance(sample, Sample):
            return sample
        try:
            return cls.model_validate(sample)
        except ValidationError as exc:
            first = first_error(exc)
            raise AbgateError(f"{where}: {first.dotted or '(line)'}: {first.message}") from None

    def health_value(self, name: str) -> Any:
        """A field of the sample's ``health`` as recorded, else what its finish reason
        says (``truncated``, ``natural_stop``, ``invalid``, ``error``; None otherwise)."""
        if name in self.health.model_fields_set or name in (self.health.model_extra or {}):
            return getattr(self.health, name)
        reason = self.finish_reason
        fallback: dict[str, Any] = {"truncated": reason == "length",
                                    "natural_stop": reason == "stop", "invalid": False,
                                    "error": reason == "error"}
        return fallback.get(name)

    @property
    def measured(self) -> bool:
        return not self.warmup

    @property
    def failed(self) -> bool:
        """An engine error (its finish reason or its health says so)."""
        return self.finish_reason == "error" or bool(self.health.error)

    def produced_tokens(self) -> int:
        """The output tokens, as progress counts them (0 when unrecorded)."""
        return self.output.tokens or 0

    def output_sha(self) -> str | None:
        """The output tokens' SHA-256, from the record or its token IDs."""
        return self.output.sha256 or ids_sha256(self.output.token_ids)


def sample_key(item_id: str, seed: int) -> str:
    return f"{item_id}#{seed}"


def ids_sha256(ids: Sequence[int] | None) -> str | None:
    if ids is None:
        return None
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
