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

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from abgate.bench.probes import Probe, ProbeResult, check_fits, default_probes, run_probes
from abgate.bench.resources import engine_resources
from abgate.bench.roofline import ModelBytes, measure_peak_bandwidth, model_bytes_for, roofline
from abgate.bench.run import BenchCase, BenchPlan, BenchResult, execute_plan, plan_bench
from abgate.engines import engine_module
from abgate.engines.args import redact_env, validate_args
from abgate.engines.base import Engine
from abgate.errors import AbgateError, UsageError
from abgate.host import git_state, host_info
from abgate.progress import Reporter
from abgate.runner import records as rec
from abgate.runner.spec import abgate_version, file_sha256


@dataclass(frozen=True)
class BenchConfig:
    """Everything a user chooses for a bench. ``input_lens`` entries of ``None`` mean
    ``max`` (fill the context)."""

    engine: str = "llamacpp"
    model: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    input_lens: tuple[int | None, ...] = (512,)
    output_len: int = 128
    warmup: int = 1
    repeats: int = 3
    prompt_seed: int = 0
    expect_prompt_sha: tuple[str, ...] = ()
    probes: bool = False
    probe_len: int = 1024
    probe_depth: float = 0.5
    probe_seed: int = 0
    peak_bw_gbps: float | None = None
    weights_bytes: int | None = None
    bw_probe_mib: int = 512

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["env"] = redact_env(self.env)
        d["input_lens"] = ["max" if n is None else n for n in self.input_lens]
        d["expect_prompt_sha"] = list(self.expect_prompt_sha)
        return d

    @property
    def cases(self) -> list[BenchCase]:
        return [BenchCase(n, self.output_len) for n in self.input_lens]


@dataclass(frozen=True)
class PreparedBench:
    config: BenchConfig
    engine: ModuleType
    model: str
    resolved_args: dict[str, Any]
    spec: dict[str, Any]
    spec_digest: str


@dataclass(frozen=True)
class BenchOutcome:
    out_dir: Path
    status: str
    summary: dict[str, Any]


def _check_config(c: BenchConfig) -> None:
    if c.output_len < 2:
        raise UsageError(f"--output-len must be >= 2 (steady decode is measured over tokens "
                         f"2..N), got {c.output_len}")
    if c.warmup < 0 or c.repeats < 1:
        raise UsageError(f"need --warmup >= 0 and --repeats >= 1 (got {c.warmup}, {c.repeats})")
    if c.expect_prompt_sha and len(c.expect_prompt_sha) not in (1, len(c.input_lens)):
        raise UsageError(f"--expect-prompt-sha has {len(c.expect_prompt_sha)} SHAs for "
                         f"{len(c.input_lens)} input lengths (give one per length, in order)")
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
    module = engine_module(c.engine)
    resolved = validate_args(c.engine, c.engine_args, module.ARG_SPECS)
    model = module.resolve_model(c.model)
    model_info: dict[str, Any] = {"path": model}
    if Path(model).is_file():
        model_info |= {"sha256": file_sha256(model), "size": Path(model).stat().st_size}
    spec = {"kind": "bench", "engine": c.engine, "model": model_info,
            "engine_args": c.engine_args, "resolved_engine_args": resolved,
            "env": redact_env(c.env), **{k: v for k, v in c.to_dict().items()
                                          if k not in ("engine", "model", "engine_args", "env")},
            "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "ignore_eos": True}}
    digest = hashlib.sha256(rec.canonical_json(spec).encode()).hexdigest()
    return PreparedBench(c, module, model, resolved, spec, digest)


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse a non-empty directory (unless ``force`` on a run directory) before loading."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path {out} exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"run directory {out} is not empty; use --force to overwrite it")
        if not (out / rec.RUN_FILE).exists():
            raise UsageError(f"--force refuses to clear {out}: it holds no run.json, so it "
                             "may not be an abgate run directory")


def _new_doc(p: PreparedBench) -> dict[str, Any]:
    return {"schema_version": rec.SCHEMA_VERSION, "kind": "bench", "status": "running",
            "abgate_version": abgate_version(), "config": p.config.to_dict(), "spec": p.spec,
            "spec_digest": p.spec_digest, "git": git_state(), "host": host_info(),
            "started_at": time.time(), "ended_at": None, "error": None}


def _plan(p: PreparedBench, engine: Engine) -> tuple[BenchPlan, list[Probe]]:
    c = p.config
    plan = plan_bench(engine, c.cases, prompt_seed=c.prompt_seed,
                      expect_prompt_sha=c.expect_prompt_sha)
    probes: list[Probe] = []
    if c.probes:
        probes = default_probes(engine.tokenize, needle_len=c.probe_len,
                                needle_depth=c.probe_depth, seed=c.probe_seed)
        check_fits(engine, probes, plan.n_ctx)
    return plan, probes


def execute_bench(p: PreparedBench, out: Path, *, force: bool = False,
                  progress: Reporter | None = None) -> BenchOutcome:
    """Load the engine, run the bench and probes, and write the run directory."""
    check_out_dir(out, force)
    os.environ.update(p.config.env)
    engine = p.engine.load(p.model, p.resolved_args, None, None)
    doc: dict[str, Any] = {}
    try:
        plan, probes = _plan(p, engine)
        rec.prepare_new_dir(out, force)
        doc = _new_doc(p)
        doc["engine"] = engine.describe().to_dict()
        rec.write_json_atomic(out / rec.RUN_FILE, doc)
        if progress is not None:
            total = len(plan.cases) * (p.config.warmup + p.config.repeats) + len(probes)
            progress.on_start(0, total)
        return _measure(p, engine, plan, probes, out, doc, progress)
    finally:
        engine.close()
        if doc:
            doc["cleanup"] = getattr(engine, "cleanup_evidence", None)
            doc["ended_at"] = time.time()
            rec.write_json_atomic(out / rec.RUN_FILE, doc)


def _measure(p: PreparedBench, engine: Engine, plan: BenchPlan, probes: Sequence[Probe],
             out: Path, doc: dict[str, Any], progress: Reporter | None) -> BenchOutcome:
    c = p.config
    result: BenchResult | None = None
    probe_results: list[ProbeResult] = []
    resources: dict[str, Any] = {}
    try:
        with rec.SampleWriter(out / rec.SAMPLES_FILE) as writer:

            def record(sample: dict[str, Any]) -> None:
                writer.append(sample)
                if progress is not None:
                    progress.on_sample(sample)

            result = execute_plan(engine, plan, warmup=c.warmup, repeats=c.repeats,
                                  on_sample=record)
            if probes:
                probe_results = run_probes(engine, probes, plan.n_ctx, record)
        resources = engine_resources(engine)
        doc["status"] = "complete"
    except KeyboardInterrupt:
        doc["status"], doc["error"] = "interrupted", "interrupted by the user"
    except AbgateError as exc:
        doc["status"], doc["error"] = "failed", str(exc)
        raise
    except Exception as exc:
        doc["status"], doc["error"] = "failed", f"{type(exc).__name__}: {exc}"
        raise AbgateError(f"bench failed: {doc['error']} (records kept in {out})") from exc
    finally:
        summary = build_summary(p, doc, plan, result, probe_results, resources)
        rec.write_json_atomic(out / rec.SUMMARY_FILE, summary)
    return BenchOutcome(out, doc["status"], summary)


def peak_bandwidth(c: BenchConfig) -> dict[str, Any]:
    if c.peak_bw_gbps is not None:
        return {"gbps": c.peak_bw_gbps, "source": "declared (--peak-bw)"}
    return measure_peak_bandwidth(c.bw_probe_mib)


def case_roofline(case: dict[str, Any], mb: ModelBytes, peak: float | None) -> dict[str, Any]:
    decode = case["speed"]["steady_decode_tps"].get("median")
    mean_ctx = case["input_len"] + case["output_len"] / 2.0
    return roofline(mb, decode, mean_ctx, peak)


def build_summary(p: PreparedBench, doc: dict[str, Any], plan: BenchPlan,
                  result: BenchResult | None, probes: Sequence[ProbeResult],
                  resources: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``: per-case distributions, fidelity, reference SHAs and roofline;
    probes; resources; the bandwidth figures used."""
    c = p.config
    cases = [cr.to_dict(samples=False) for cr in (result.cases if result else plan.cases)]
    bandwidth: dict[str, Any] = {}
    mb = ModelBytes(None, "unknown")
    if doc.get("status") == "complete":
        mb = model_bytes_for(doc.get("engine", {}), c.weights_bytes)
        bandwidth = peak_bandwidth(c)
        for case in cases:
            case["roofline"] = case_roofline(case, mb, bandwidth.get("gbps"))
    return {
        "schema_version": rec.SCHEMA_VERSION, "kind": "bench", "status": doc.get("status"),
        "n_ctx": plan.n_ctx, "warmup": c.warmup, "repeats": c.repeats,
        "prompt_seed": c.prompt_seed, "cases": cases,
        "probes": None if not c.probes else {
            "n": len(probes), "n_passed": sum(r.passed for r in probes),
            "results": [r.to_dict() for r in probes]},
        "resources": resources, "model_bytes": mb.to_dict(), "peak_bandwidth": bandwidth,
    }
