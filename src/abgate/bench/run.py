"""The bench loop: fixed-length prompts, greedy decoding of exactly N tokens, per-request
token-level timings beside the engine's own counters, and a greedy reference capture.

:func:`run_bench` takes an already-loaded :class:`~abgate.engines.base.Engine` and
returns a :class:`BenchResult` whose ``to_dict`` is plain JSON: per case the prompt
SHA, the output token IDs and their SHA, every request's timings (warm-up ones marked),
the engine's timings and the fidelity ratios, and the per-case distributions.
Requests run one at a time, in order, so no request waits behind another, unless a
concurrency is asked for (served engines, vLLM): then each repeat is a batch of that many
requests in flight together, and the case also reports its throughput.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from abgate.bench.fidelity import FIDELITY_FIELDS, fidelity
from abgate.bench.prompts import fixed_length_prompt, prompt_sha256
from abgate.bench.samples import (
    BenchBatch,
    BenchCaseRef,
    BenchOutput,
    BenchPrompt,
    BenchSample,
    text_sha256,
)
from abgate.engines import keys
from abgate.engines.base import Engine, GenerationRequest, GenerationResult, SamplingParams
from abgate.errors import AbgateError, UsageError
from abgate.metrics import distribution, inter_token_latencies, request_timing
from abgate.records.bench_sections import (
    CaseFigures,
    FidelityDistributions,
    PromptFileRecord,
    SpeedDistributions,
)
from abgate.records.samples import ids_sha256
from abgate.records.sections import Distribution
from abgate.records.side_documents import AbBenchCase
from abgate.runner.summary import SPEED_FIELDS

OnSample = Callable[[BenchSample], None]
F = TypeVar("F", bound=CaseFigures)


WHOLE_PROMPT = 0  # input_len of a --prompt-file case without --input-len: all its tokens


@dataclass(frozen=True)
class BenchCase:
    """One prompt length and decode length. ``input_len=None`` means "fill the context":
    ``n_ctx - output_len``; :data:`WHOLE_PROMPT`, the whole ``--prompt-file`` (see
    :func:`resolve_cases`). One output token measures prefill and TTFT only: steady
    decode and TPOT are undefined (``docs/metrics.md``)."""

    input_len: int | None
    output_len: int

    @property
    def label(self) -> str:
        n = {None: "max", WHOLE_PROMPT: "prompt"}.get(self.input_len, self.input_len)
        return f"{n}/{self.output_len}"


@dataclass
class CaseResult:
    case: BenchCase
    prompt_ids: list[int]
    prompt_sha256: str
    samples: list[BenchSample] = field(default_factory=list)

    @property
    def measured(self) -> list[BenchSample]:
        return [s for s in self.samples if not s.warmup]

    def figures(self, model: type[F], /, **more: Any) -> F:
        """The case's figures as ``model`` (:class:`CaseFigures`, or a summary's or a
        baseline's case), with the ``more`` fields that model adds after them."""
        assert self.case.input_len is not None  # (resolved by plan_bench)
        return model(input_len=self.case.input_len, output_len=self.case.output_len,
                     prompt_tokens=len(self.prompt_ids), prompt_sha256=self.prompt_sha256,
                     **reference(self.measured, [s for s in self.samples if s.warmup]),
                     n_warmup=len(self.samples) - len(self.measured),
                     **case_summary(self.measured), **more)

    def bench_case(self, samples: bool = True) -> AbBenchCase:
        """The figures, with every request's line when ``samples`` (an A/B arm's
        ``bench.json`` case)."""
        return (self.figures(AbBenchCase, samples=list(self.samples)) if samples
                else self.figures(AbBenchCase))


@dataclass
class BenchResult:
    cases: list[CaseResult]
    n_ctx: int | None
    warmup: int
    repeats: int
    prompt_seed: int

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        return {"n_ctx": self.n_ctx, "warmup": self.warmup, "repeats": self.repeats,
                "prompt_seed": self.prompt_seed,
                "cases": [c.bench_case(samples).to_dict() for c in self.cases]}


def context_length(engine: Engine) -> int | None:
    """The engine's context window from ``describe()`` (``n_ctx`` or ``max_model_len``)."""
    eff = engine.describe().effective_config
    for key in ("n_ctx", "max_model_len"):
        value = eff.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def resolve_cases(cases: Sequence[BenchCase], n_ctx: int | None,
                  prompt_len: int | None = None) -> list[BenchCase]:
    """Fill in ``max`` (and whole-prompt) lengths and refuse any case past the context,
    naming ``n_ctx``, or past a ``--prompt-file``'s length."""
    out = []
    for c in cases:
        if c.output_len < 1:
            raise UsageError(f"--output-len must be >= 1, got {c.output_len}")
        input_len = prompt_len if c.input_len == WHOLE_PROMPT else c.input_len
        if input_len is None:
            if n_ctx is None:
                raise UsageError("--input-len max needs the engine's context length, "
                                 "which this engine does not report")
            input_len = n_ctx - c.output_len
            if input_len < 1:
                raise UsageError(f"--input-len max: output length {c.output_len} leaves no "
                                 f"room for a prompt in the context (n_ctx={n_ctx})")
        if n_ctx is not None and input_len + c.output_len > n_ctx:
            raise UsageError(
                f"input {input_len} + output {c.output_len} tokens = "
                f"{input_len + c.output_len} exceeds the context (n_ctx={n_ctx}) by "
                f"{input_len + c.output_len - n_ctx}; the largest input is "
                f"{n_ctx - c.output_len} (--input-len max)")
        if prompt_len is not None and input_len > prompt_len:
            raise UsageError(f"input {input_len} tokens: the --prompt-file has only "
                             f"{prompt_len} tokens in this engine's vocabulary")
        out.append(BenchCase(input_len, c.output_len))
    return out


def check_prompt_shas(results: Sequence[CaseResult], expected: Sequence[str]) -> None:
    """``--expect-prompt-sha``: one SHA per case in order (or one for all cases)."""
    if not expected:
        return
    if len(expected) not in (1, len(results)):
        raise UsageError(f"--expect-prompt-sha has {len(expected)} SHA(s) for "
                         f"{len(results)} input length(s)")
    want = list(expected) * len(results) if len(expected) == 1 else list(expected)
    for r, sha in zip(results, want, strict=True):
        if r.prompt_sha256 != sha:
            raise UsageError(
                f"prompt SHA for input {r.case.input_len} is {r.prompt_sha256[:16]}..., "
                f"expected {sha[:16]}...: the tokenizer or the filler differs; refusing to run")


def bench_request(case_id: str, prompt_ids: Sequence[int], output_len: int,
                  seed: int = 0) -> GenerationRequest:
    """Greedy, EOS ignored: exactly ``output_len`` tokens are decoded."""
    params = SamplingParams(max_tokens=output_len, temperature=0.0, top_p=1.0, top_k=0,
                            seed=seed, ignore_eos=True)
    return GenerationRequest(id=case_id, params=params, prompt_token_ids=tuple(prompt_ids))


def bench_sample(case: BenchCase, index: int, warmup: bool, result: GenerationResult, *,
                 key: str | None = None, batch: BenchBatch | None = None) -> BenchSample:
    """The ``samples.jsonl`` line for one bench request (``key``: ``LABEL#index``
    unless given); ``batch``: the concurrent batch it ran in, if any."""
    timing = request_timing(result)
    times = result.token_times or []
    itl_ms = [g * 1000.0 for g in inter_token_latencies(times)]
    sample = BenchSample(
        key=key or f"{case.label}#{index}",
        case=BenchCaseRef(input_len=case.input_len, output_len=case.output_len),
        index=index, warmup=warmup, finished_at=time.time(),
        prompt=BenchPrompt(tokens=result.prompt_tokens,
                           sha256=ids_sha256(result.prompt_token_ids)),
        output=BenchOutput(tokens=result.output_tokens, token_ids=result.output_token_ids,
                           sha256=ids_sha256(result.output_token_ids), text=result.text),
        finish_reason=result.finish_reason, error=result.error, timing=timing,
        itl_ms=Distribution.model_validate(distribution(itl_ms)),
        token_times_ms=[round((t - result.t_submit) * 1000.0, 4) for t in times] or None,
        engine_timings=dict(result.engine_timings), fidelity=fidelity(result, timing))
    # (a line without a batch has no "batch" key, as before batches existed)
    return sample if batch is None else sample.model_copy(update={"batch": batch})


def _check_result(case: BenchCase, result: GenerationResult) -> None:
    if result.finish_reason == "error":
        raise AbgateError(f"case {case.label}: the engine failed: {result.error}")
    if result.prompt_tokens != case.input_len:
        raise AbgateError(f"case {case.label}: the engine reports {result.prompt_tokens} "
                          f"prompt tokens for a {case.input_len}-token prompt")
    if result.output_tokens != case.output_len:
        raise AbgateError(f"case {case.label}: the engine decoded {result.output_tokens} "
                          f"tokens, not {case.output_len} (does it honour ignore_eos?)")


@dataclass
class BenchPlan:
    """Resolved cases with their prompts: everything checked before any request runs."""

    cases: list[CaseResult]
    n_ctx: int | None
    prompt_seed: int


def prompt_ids(prompt: Mapping[str, Any], tokenize: Callable[[str], list[int]],
               n_vocab: int | None = None) -> list[int]:
    """The recorded ``--prompt-file``'s token IDs in this engine's vocabulary (an ID past
    it is refused)."""
    p = PromptFileRecord.model_validate(prompt)
    ids = list(p.token_ids) if p.token_ids is not None else tokenize(p.text or "")
    if not ids:
        raise UsageError(f"--prompt-file {p.file}: tokenizes to no tokens")
    if n_vocab is not None and max(ids) >= n_vocab:
        raise UsageError(f"--prompt-file {p.file}: token ID {max(ids)} is past "
                         f"this model's vocabulary ({n_vocab} tokens)")
    return ids


def plan_bench(engine: Engine, cases: Sequence[BenchCase], *, prompt_seed: int = 0,
               expect_prompt_sha: Sequence[str] = (),
               prompt: dict[str, Any] | None = None) -> BenchPlan:
    """Resolve lengths against the context (``UsageError`` naming ``n_ctx`` past it),
    build the prompts (the filler, or the first N tokens of ``prompt``, a read
    ``--prompt-file``) and check their SHAs against ``expect_prompt_sha``."""
    n_ctx = context_length(engine)
    source = None
    if prompt is not None:
        vocab = keys.n_vocab(engine.describe().effective_config)
        source = prompt_ids(prompt, engine.tokenize, vocab)
    results = []
    for c in resolve_cases(cases, n_ctx, None if source is None else len(source)):
        assert c.input_len is not None
        if source is None:
            ids = fixed_length_prompt(engine.tokenize, c.input_len, prompt_seed,
                                      engine.text_stable)
        else:
            ids = source[:c.input_len]
            if engine.text_stable is not None and not engine.text_stable(ids):
                raise UsageError(f"--prompt-file: its first {c.input_len} tokens do not "
                                 "survive this engine's text round trip (it is sent text)")
        results.append(CaseResult(c, ids, prompt_sha256(ids)))
    check_prompt_shas(results, expect_prompt_sha)
    return BenchPlan(results, n_ctx, prompt_seed)


def execute_plan(engine: Engine, plan: BenchPlan, *, warmup: int = 1, repeats: int = 3,
                 seed: int = 0, on_sample: OnSample | None = None,
                 concurrency: int = 1) -> BenchResult:
    """Run every case ``warmup + repeats`` times (warm-up requests are measured, recorded
    with ``warmup: true`` and left out of the summaries). ``on_sample`` gets each
    request's record the moment it finishes. A request that fails, or returns other
    token counts than asked for, raises ``AbgateError`` after being recorded.

    At ``concurrency`` > 1 each repeat is a batch of that many requests handed to the
    engine at once (its own ``concurrency`` option keeps them in flight together); each
    request is a sample (``key`` ``LABEL#i.j``) that also carries the batch's wall time
    and output tokens, from which the case's throughput (output tok/s) is computed."""
    if warmup < 0 or repeats < 1 or concurrency < 1:
        raise UsageError(f"need --warmup >= 0, --repeats >= 1 and --concurrency >= 1 (got "
                         f"{warmup}, {repeats}, {concurrency})")
    for cr in plan.cases:
        for i in range(warmup + repeats):
            ids = [f"{cr.case.label}#{i}" + (f".{j}" if concurrency > 1 else "")
                   for j in range(concurrency)]
            results = engine.generate([bench_request(rid, cr.prompt_ids, cr.case.output_len,
                                                     seed) for rid in ids])
            batch = batch_facts(i, results) if concurrency > 1 else None
            for rid, result in zip(ids, results, strict=True):
                sample = bench_sample(cr.case, i, i < warmup, result, key=rid, batch=batch)
                cr.samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
            for result in results:
                _check_result(cr.case, result)
    return BenchResult(plan.cases, plan.n_ctx, warmup, repeats, plan.prompt_seed)


def batch_facts(index: int, results: Sequence[GenerationResult]) -> BenchBatch:
    """One concurrent batch: its size, wall time (first submit to last token) and the
    output tokens of all its requests."""
    last = [r.t_last_token for r in results if r.t_last_token is not None]
    wall = max(last) - min(r.t_submit for r in results) if last else None
    tokens = sum(r.output_tokens for r in results)
    return BenchBatch(index=index, size=len(results), wall_s=wall, output_tokens=tokens,
                      output_tps=tokens / wall if wall else None)


def run_bench(engine: Engine, cases: Sequence[BenchCase], *, warmup: int = 1,
              repeats: int = 3, prompt_seed: int = 0, seed: int = 0,
              expect_prompt_sha: Sequence[str] = (), prompt: dict[str, Any] | None = None,
              on_sample: OnSample | None = None) -> BenchResult:
    """:func:`plan_bench` then :func:`execute_plan` on an already-loaded engine."""
    plan = plan_bench(engine, cases, prompt_seed=prompt_seed,
                      expect_prompt_sha=expect_prompt_sha, prompt=prompt)
    return execute_plan(engine, plan, warmup=warmup, repeats=repeats, seed=seed,
                        on_sample=on_sample)


def reference(measured: Sequence[BenchSample],
              warmups: Sequence[BenchSample] = ()) -> dict[str, Any]:
    """Greedy reference capture: the output token IDs and SHA of the first measured
    request, whether every measured repeat produced the same tokens (by token IDs, else
    by text: some servers return no output token IDs), and whether the warm-ups did too
    (None without warm-ups): those fields of :class:`~abgate.records.bench_sections.
    CaseFigures`."""
    shas = [s.output_sha() for s in measured]
    first = measured[0].output if measured else None
    ids, sha, text = (None, None, None) if first is None else (
        first.token_ids, first.sha256, first.text)
    warm = [s.output_sha() for s in warmups]
    return {"output_token_ids": ids, "output_sha256": sha,
            "output_text": text, "output_text_sha256": text_sha256(text),
            "outputs_identical": len(set(shas)) <= 1,
            "warmup_identical": all(w == shas[0] for w in warm) if warm and shas else None}


def case_summary(measured: Sequence[BenchSample]) -> dict[str, Any]:
    """Request-weighted distributions over the measured (non-warm-up) requests; ITL is
    pooled over all their token gaps (token-weighted): the typed values of those fields
    of :class:`~abgate.records.bench_sections.CaseFigures`."""
    itl: list[float] = []
    for s in measured:
        times = s.token_times_ms or []
        itl.extend(b - a for a, b in zip(times, times[1:], strict=False))
    batches = {s.batch.index: s.batch for s in measured if s.batch is not None}
    return {
        "n": len(measured),
        "concurrency": max((b.size for b in batches.values()), default=1),
        "throughput_tps": _dist([b.output_tps for b in batches.values()
                                 if b.output_tps is not None]) if batches else None,
        "speed": SpeedDistributions(**{f: _dist([getattr(s.timing, f) for s in measured])
                                       for f in SPEED_FIELDS}),
        "itl_ms": _dist(itl),
        "fidelity": FidelityDistributions(**{
            f: _dist([s.fidelity.value(f) for s in measured]) for f in FIDELITY_FIELDS}),
        "counts_match": all(s.fidelity.counts_match is not False for s in measured),
    }


def _dist(values: Sequence[float | None]) -> Distribution:
    return Distribution.model_validate(distribution(values))
