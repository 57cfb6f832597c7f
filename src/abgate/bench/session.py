"""``abgate bench`` end to end: validate, load, plan, measure, probe, record.

The order keeps failures cheap and records honest:

1. :func:`prepare_bench` checks everything that needs no engine (engine args, model
   path and hash, lengths, probe settings) and builds the spec.
2. The engine loads; :func:`~abgate.bench.run.plan_bench` resolves the lengths against
   its context and checks the prompt SHAs. Only then is the run directory written, so
   a refused bench leaves nothing behind.
3. Requests run and are appended to ``samples.jsonl`` (fsynced) as they finish; probes
   follow; resources are read while the engine is still loaded; then the engine closes
   and the bandwidth probe runs (its buffer would otherwise inflate the peak RSS).
4. ``summary.json`` and the final ``run.json`` are written atomically.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from abgate.bench import limits
from abgate.bench.probes import (
    Probe,
    ProbeLine,
    ProbeResult,
    check_fits,
    default_probes,
    run_probes,
)
from abgate.bench.resources import engine_resources, holds_gpu_memory
from abgate.bench.roofline import (
    measure_gpu_bandwidth,
    measure_gpu_bandwidth_in_child,
    measure_peak_bandwidth,
    model_bytes_for,
    roofline,
    runs_on_gpu,
)
from abgate.bench.run import (
    WHOLE_PROMPT,
    BenchCase,
    BenchPlan,
    BenchResult,
    execute_plan,
    plan_bench,
)
from abgate.bench.samples import BenchSample
from abgate.engines import keys
from abgate.engines.base import Engine
from abgate.errors import AbgateError, UsageError
from abgate.identity import json_sha256
from abgate.progress import Reporter
from abgate.provenance import ContractOutcome
from abgate.records.bench_sections import (
    BenchProbes,
    BenchSummaryCase,
    CaseFigures,
    EngineResources,
    ModelBytes,
    PeakBandwidth,
    Roofline,
)
from abgate.records.documents import BenchRecord, LoadFacts
from abgate.records.sections import EngineRecord
from abgate.records.side_documents import BenchSummary
from abgate.runner import records as rec
from abgate.runner.documents import new_spec_record, write_record
from abgate.runner.execute import Status, check_interrupted, tracked
from abgate.runner.outdir import check_new_dir, claimed, prepare_new_dir
from abgate.runner.provenance import ProvenanceOptions, check_before_load, record_after_load
from abgate.runner.session import (
    EngineSession,
    EngineSpec,
    PreparedEngine,
    check_model,
    loaded,
    prepare_engine,
    recorded_engine_part,
)
from abgate.schema import FORBID, Bool, Float, Int, Str, StrList, StrTable, Table, validated


def _lengths(value: Any) -> Any:
    """As recorded, ``"max"`` (fill the context) is ``None``."""
    if isinstance(value, list | tuple):
        return tuple(None if n == "max" else n for n in value)
    return value


@pydantic_dataclass(frozen=True, config=FORBID)
class BenchConfig:
    """Everything a user chooses for a bench (``bench``, ``baseline record``; a
    baseline's record read back): a pydantic model. ``input_lens`` entries of ``None``
    mean ``max`` (fill the context)."""

    engine: Str = "llamacpp"
    model: Str | None = None
    engine_args: Table = field(default_factory=dict)
    env: StrTable = field(default_factory=dict)
    engine_options: Table = field(default_factory=dict)
    input_lens: Annotated[tuple[Int | None, ...], BeforeValidator(_lengths)] = (512,)
    output_len: Int = 128
    warmup: Int = 1
    repeats: Int = 3
    prompt_seed: Int = 0
    expect_prompt_sha: StrList = ()
    prompt: Table | None = None  # a read --prompt-file (bench/prompt_file.py)
    probes: Bool = False
    probe_len: Int = 1024
    probe_depth: Float = 0.5
    probe_seed: Int = 0
    peak_bw_gbps: Float | None = None
    weights_bytes: Int | None = None
    bw_probe_mib: Int = 512

    @classmethod
    def from_dict(cls, d: Any, where: str = "config") -> BenchConfig:
        """The inverse of :meth:`to_dict` (a baseline's config read back), every key
        and type checked: a one-line UsageError names ``where`` and the key."""
        return validated(cls, d, where)

    def to_dict(self) -> dict[str, Any]:
        d = recorded_engine_part(asdict(self))
        d["input_lens"] = ["max" if n is None else n for n in self.input_lens]
        d["expect_prompt_sha"] = list(self.expect_prompt_sha)
        return d

    @property
    def cases(self) -> list[BenchCase]:
        if self.prompt is not None and not self.input_lens:
            return [BenchCase(WHOLE_PROMPT, self.output_len)]
        return [BenchCase(n, self.output_len) for n in self.input_lens]

    @property
    def engine_spec(self) -> EngineSpec:
        return EngineSpec(self.engine, self.model, self.engine_args, self.engine_options,
                          self.env)


@dataclass(frozen=True)
class PreparedBench:
    config: BenchConfig
    engine: PreparedEngine
    spec: dict[str, Any]
    spec_digest: str


@dataclass(frozen=True)
class BenchOutcome:
    out_dir: Path
    status: str
    summary: BenchSummary | None  # None when the bench ended before its summary


def _check_config(c: BenchConfig) -> None:
    if c.output_len < 1:
        raise UsageError(f"--output-len must be >= 1 (1: prefill and TTFT only, steady "
                         f"decode is measured over tokens 2..N), got {c.output_len}")
    if c.warmup < 0 or c.repeats < 1:
        raise UsageError(f"need --warmup >= 0 and --repeats >= 1 (got {c.warmup}, {c.repeats})")
    if not c.cases:
        raise UsageError("--input-len needs at least one length")
    if c.expect_prompt_sha and len(c.expect_prompt_sha) not in (1, len(c.cases)):
        raise UsageError(f"--expect-prompt-sha has {len(c.expect_prompt_sha)} SHAs for "
                         f"{len(c.cases)} input lengths (give one per length, in order)")
    if c.probes and not (0.0 <= c.probe_depth <= 1.0):
        raise UsageError(f"--probe-depth must be within 0..1, got {c.probe_depth}")
    if c.probes and c.probe_len < 64:
        raise UsageError(f"--probe-len must be >= 64 tokens, got {c.probe_len}")
    if c.peak_bw_gbps is not None and c.peak_bw_gbps <= 0:
        raise UsageError(f"--peak-bw must be > 0 GB/s, got {c.peak_bw_gbps}")
    if c.weights_bytes is not None and c.weights_bytes <= 0:
        raise UsageError(f"--weights-bytes must be > 0, got {c.weights_bytes}")


def prepare_bench(c: BenchConfig) -> PreparedBench:
    """Validate everything that needs no engine, in seconds, before anything loads."""
    _check_config(c)
    engine = prepare_engine(c.engine_spec)
    own = ("engine", "model", "engine_args", "env", "engine_options")
    spec = {"kind": "bench", **engine.record(),
            **{k: v for k, v in c.to_dict().items() if k not in own},
            "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "ignore_eos": True}}
    return PreparedBench(c, engine, spec, json_sha256(spec))


def _plan(p: PreparedBench, engine: Engine) -> tuple[BenchPlan, list[Probe]]:
    c = p.config
    plan = plan_bench(engine, c.cases, prompt_seed=c.prompt_seed,
                      expect_prompt_sha=c.expect_prompt_sha, prompt=c.prompt)
    probes: list[Probe] = []
    if c.probes:
        probes = default_probes(engine.tokenize, needle_len=c.probe_len,
                                needle_depth=c.probe_depth, seed=c.probe_seed)
        check_fits(engine, probes, plan.n_ctx)
    return plan, probes


def execute_bench(p: PreparedBench, out: Path, *, force: bool = False,
                  progress: Reporter | None = None,
                  provenance: ProvenanceOptions | None = None) -> BenchOutcome:
    """Load the engine, plan (a refused plan writes nothing), then run the bench and
    probes under the shared run bookkeeping (run.log, SIGTERM, final status). A
    contract is checked on the request before the load (exit 2, nothing written) and on
    the engine as loaded (the directory is written ``failed`` with the violation); the
    provenance (environment, mapped libraries, manifest, contract) is recorded."""
    prov = provenance or ProvenanceOptions()
    contract = check_before_load(prov, p.engine)
    check_new_dir(out, force, rec.RUN_FILE)
    facts = LoadFacts()  # filled by loaded() (engine, processes, cleanup)
    made: list[BenchRecord] = []  # the record, once the directory is written
    summary: list[BenchSummary] = []  # the summary, once written
    with ExitStack() as claim:  # the directory's lock, held until the last write
        try:
            with loaded(p.engine, None, facts) as session:
                with session.env():
                    plan, probes = _plan(p, session.engine)
                claim.enter_context(claimed(out, resume=False, force=force,
                                            marker=rec.RUN_FILE))
                made.append(_new_bench_record(p, out, force, facts))
                _record_provenance(prov, contract, session, made[0])
                _run_claimed(p, out, session, plan, probes, made[0], summary, progress)
        finally:
            if made:  # the directory was written: keep it complete
                made[0].cleanup = facts.cleanup
                write_record(out / rec.RUN_FILE, made[0])
    return BenchOutcome(out, str(made[0].status) if made else "failed",
                        summary[0] if summary else None)


def _new_bench_record(p: PreparedBench, out: Path, force: bool, facts: LoadFacts
                      ) -> BenchRecord:
    """The directory cleared and its record made, with what the load recorded."""
    prepare_new_dir(out, force)
    doc = new_spec_record("bench", p, out=out, engine=facts.engine,
                          engine_processes=facts.engine_processes)
    assert isinstance(doc, BenchRecord)
    return doc


def _record_provenance(prov: ProvenanceOptions, contract: ContractOutcome | None,
                       session: EngineSession, doc: BenchRecord) -> None:
    try:
        record_after_load(prov, contract, session, doc)
    except AbgateError as exc:  # (the directory is written: its run.json says why)
        doc.status, doc.error, doc.ended_at = "failed", str(exc), time.time()
        raise


def _run_claimed(p: PreparedBench, out: Path, session: EngineSession, plan: BenchPlan,
                 probes: list[Probe], doc: BenchRecord, summary: list[BenchSummary],
                 progress: Reporter | None) -> None:
    write_record(out / rec.RUN_FILE, doc)
    if progress is not None:
        batch = keys.concurrency(p.config.engine_options)
        total = len(plan.cases) * (p.config.warmup + p.config.repeats) * batch + len(probes)
        progress.on_start(0, total)
    _measure(p, session, plan, probes, out, doc, summary, progress)


@dataclass
class _Measured:
    """What a bench has measured so far (its summary is built from it on every way out)."""

    result: BenchResult | None = None
    probes: list[ProbeResult] = field(default_factory=list)
    resources: EngineResources = field(default_factory=EngineResources)


def _measure(p: PreparedBench, session: EngineSession, plan: BenchPlan,
             probes: Sequence[Probe], out: Path, doc: BenchRecord,
             summary: list[BenchSummary], progress: Reporter | None) -> None:
    c, engine = p.config, session.engine
    parts = _Measured()

    def finish(status: Status) -> None:
        doc.status, doc.error = status.value, status.error  # type: ignore[assignment]
        doc.ended_at = time.time()
        made = build_summary(p, doc, plan, parts.result, parts.probes, parts.resources)
        write_record(out / rec.SUMMARY_FILE, made)
        summary.append(made)
        write_record(out / rec.RUN_FILE, doc)

    with tracked(out, "bench", finish, resumable=False), session.env(), \
            rec.SampleWriter(out / rec.SAMPLES_FILE) as writer:

        def record(sample: BenchSample | ProbeLine) -> None:
            writer.append(sample)
            if progress is not None:
                progress.on_sample(sample)
            check_interrupted()

        parts.result = execute_plan(engine, plan, warmup=c.warmup, repeats=c.repeats,
                                    on_sample=record,
                                    concurrency=keys.concurrency(c.engine_options))
        if probes:
            parts.probes = run_probes(engine, probes, plan.n_ctx, record)
        parts.resources = engine_resources(session.processes)
        check_model(session.prepared, "while it was loaded")  # in the record's status


def peak_bandwidth(c: BenchConfig, engine: EngineRecord | None,
                   resources: EngineResources | None = None) -> PeakBandwidth:
    """The declared peak, else a probe of the memory the engine decodes from: the GPU's
    for an engine on a GPU (in-process, or a launched server whose processes NVML saw
    holding GPU memory), this host's CPU's for an engine running here on the CPU, and
    none for a remote endpoint, whose hardware this host cannot see."""
    if c.peak_bw_gbps is not None:
        return PeakBandwidth(gbps=c.peak_bw_gbps, source="declared (--peak-bw)")
    res = resources if resources is not None else EngineResources()
    if runs_on_gpu(engine):
        return measure_gpu_bandwidth()
    if holds_gpu_memory(res):  # a launched server on a GPU: probe it from a child process
        return measure_gpu_bandwidth_in_child()
    if res.remote:
        return PeakBandwidth(gbps=None, source="unknown: a remote engine's memory is not on "
                                               "this host (declare it with --peak-bw)")
    return measure_peak_bandwidth(c.bw_probe_mib)


def case_roofline(case: CaseFigures, mb: ModelBytes, peak: float | None) -> Roofline:
    """The roofline at the case's median steady decode, over its mean context."""
    mean_ctx = case.input_len + case.output_len / 2.0
    return roofline(mb, case.speed.steady_decode_tps.median, mean_ctx, peak)


def build_summary(p: PreparedBench, doc: BenchRecord, plan: BenchPlan,
                  result: BenchResult | None, probes: Sequence[ProbeResult],
                  resources: EngineResources) -> BenchSummary:
    """``summary.json``: per-case distributions, fidelity, reference SHAs and roofline;
    probes; resources; the bandwidth figures used."""
    c = p.config
    cases = [cr.figures(BenchSummaryCase) for cr in (result.cases if result else plan.cases)]
    bandwidth = PeakBandwidth()  # none: the bench did not complete
    mb = ModelBytes(None, "unknown")
    if doc.status == "complete":
        described = doc.engine.described()  # describe() as the engine gave it
        mb = model_bytes_for(described, c.weights_bytes)
        bandwidth = peak_bandwidth(c, described, resources)
        cases = [case.model_copy(update={"roofline": case_roofline(
            case, mb, bandwidth.gbps)}) for case in cases]
    return BenchSummary.new(
        status=doc.status, cases=cases,
        probes=None if not c.probes else BenchProbes(
            n=len(probes), n_passed=sum(r.passed for r in probes), results=list(probes)),
        n_ctx=plan.n_ctx, warmup=c.warmup, repeats=c.repeats, prompt_seed=c.prompt_seed,
        resources=resources, model_bytes=mb, peak_bandwidth=bandwidth,
        not_certified=list(limits.BENCH))
