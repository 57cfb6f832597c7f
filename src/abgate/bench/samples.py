"""A bench's ``samples.jsonl`` lines, typed: one :class:`BenchSample` per bench request
(built by :func:`abgate.bench.run.bench_sample`) and one
:class:`~abgate.bench.probes.ProbeLine` per probe.

The models are frozen and refuse keys they do not name (a writer's typo is an error,
not a new key on disk); a line is written as its ``model_dump(mode="json")``, with
the fields in the order of the line as abgate has always written it, and
:func:`read_bench_lines` reads a file of them back, a bad line being a one-line
``UsageError`` naming ``path:line``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from abgate.bench.fidelity import Fidelity
from abgate.bench.probes import ProbeLine
from abgate.errors import AbgateError, UsageError
from abgate.records.samples import RequestTiming
from abgate.records.sections import Distribution, Number, Section
from abgate.runner import records as rec
from abgate.schema import first_error


class BenchPart(Section):
    """A part of a bench line (and the line itself): frozen, no unknown keys; a field
    whose default is None (the line's ``batch``) is written only when set."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class BenchCaseRef(BenchPart):
    """The case a request belongs to (``abgate.bench.run.BenchCase``, resolved)."""

    input_len: int | None
    output_len: int


class BenchPrompt(BenchPart):
    tokens: int
    sha256: str | None


class BenchOutput(BenchPart):
    tokens: int
    token_ids: list[int] | None
    sha256: str | None  # of the token IDs (None when the engine returns none)
    text: str


class BenchBatch(BenchPart):
    """One concurrent batch (``--concurrency`` > 1): its position, size, wall time
    (first submit to last token) and the output tokens of all its requests."""

    index: int
    size: int
    wall_s: Number | None
    output_tokens: int
    output_tps: Number | None


class BenchSample(BenchPart):
    """One bench request's ``samples.jsonl`` line. ``key`` is ``LABEL#i`` (``LABEL#i.j``
    for request ``j`` of a concurrent batch, which also carries ``batch``)."""

    kind: Literal["bench"] = "bench"
    key: str
    case: BenchCaseRef
    index: int
    warmup: bool
    finished_at: Number
    prompt: BenchPrompt
    output: BenchOutput
    finish_reason: str
    error: str | None
    timing: RequestTiming
    itl_ms: Distribution
    token_times_ms: list[Number] | None
    engine_timings: dict[str, Any]
    fidelity: Fidelity
    batch: BenchBatch | None = None

    def produced_tokens(self) -> int:
        """The output tokens, as progress counts them."""
        return self.output.tokens

    def output_sha(self) -> str | None:
        """What two requests' outputs are compared by: the token IDs' SHA-256, else
        (engines that return no output token IDs) the text's."""
        return self.output.sha256 or text_sha256(self.output.text)


def text_sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


BenchLine = Annotated[BenchSample | ProbeLine, Field(discriminator="kind")]
_LINE: TypeAdapter[BenchSample | ProbeLine] = TypeAdapter(BenchLine)


def read_bench_lines(path: Path) -> list[BenchSample | ProbeLine]:
    """A bench's ``samples.jsonl`` as its models (a torn last line is left out); a line
    of the wrong shape is a one-line UsageError naming ``path:line`` and the field."""
    try:
        lines = rec.read_sample_lines(path)
    except AbgateError as exc:
        raise UsageError(str(exc)) from None
    out = []
    for n, line in lines:
        try:
            out.append(_LINE.validate_python(line))
        except ValidationError as exc:
            first = first_error(exc)
            raise UsageError(f"{path}:{n}: {first.dotted or 'kind'}: {first.message}") from None
    return out
