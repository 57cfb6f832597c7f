"""Speed measurement with exact definitions (see docs/metrics.md).

Library use, on an engine that is already loaded::

    from abgate.bench import BenchCase, run_bench, default_probes, run_probes

    result = run_bench(engine, [BenchCase(512, 128)], warmup=1, repeats=3)
    doc = result.to_dict()  # JSON: prompt/output SHAs, token IDs, timings, fidelity
    line = result.cases[0].samples[0]  # a BenchSample: line.output.token_ids, line.timing
    probes = run_probes(engine, default_probes(engine.tokenize))

:func:`~abgate.bench.session.execute_bench` is the whole ``abgate bench`` command
(engine load, records, roofline) for callers that want the run directory.
"""

from abgate.bench.fidelity import fidelity
from abgate.bench.probes import (
    Probe,
    ProbeResult,
    arithmetic_probe,
    copy_probe,
    default_probes,
    evaluate,
    needle_probe,
    run_probes,
)
from abgate.bench.prompts import fixed_length_prompt, parse_input_lens, prompt_sha256
from abgate.bench.roofline import measure_peak_bandwidth, model_bytes_for, roofline
from abgate.bench.run import (
    BenchCase,
    BenchPlan,
    BenchResult,
    CaseResult,
    context_length,
    execute_plan,
    plan_bench,
    run_bench,
)
from abgate.bench.samples import BenchSample, read_bench_lines
from abgate.bench.session import BenchConfig, BenchOutcome, execute_bench, prepare_bench
from abgate.records.bench_sections import ModelBytes

__all__ = [
    "BenchCase", "BenchConfig", "BenchOutcome", "BenchPlan", "BenchResult", "BenchSample",
    "CaseResult",
    "ModelBytes", "Probe", "ProbeResult", "arithmetic_probe", "context_length", "copy_probe",
    "default_probes", "evaluate", "execute_bench", "execute_plan", "fidelity",
    "fixed_length_prompt", "measure_peak_bandwidth", "model_bytes_for", "needle_probe",
    "parse_input_lens", "plan_bench", "prepare_bench", "prompt_sha256", "read_bench_lines",
    "roofline", "run_bench", "run_probes",
]
