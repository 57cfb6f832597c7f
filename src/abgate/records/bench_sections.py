"""The typed parts of a bench's ``summary.json`` and of ``baseline.json``: a bench case's
figures (:class:`CaseFigures`, built by ``bench.run.CaseResult.figures``), a summary
case with its roofline (:class:`BenchSummaryCase`), a baseline case with its reference
and repeat agreement (:class:`BaselineCase`), and a probe's result (:class:`ProbeRecord`).

Like every record section they keep the keys they do not name (``extra="allow"``) and
write an optional field (default None) only when the file had it or the writer set it,
so a record read and written again has the keys it had; unlike the mutable document
bodies they are frozen (a writer builds a new part: ``model_copy(update=...)``). The
fields are declared in the order abgate has always written them. Fields that older
version-1 records lack (``output_text``, ``warmup_identical``, ``concurrency``, the
per-repeat values, ...) are optional; writers always set them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, StrictBool, StrictInt, StrictStr

from abgate.records.sections import Distribution, Number, Section


@dataclass(frozen=True)
class ModelBytes:
    """Bytes read per decoded token, and where the figure came from (``bench.roofline``;
    a bench summary's ``model_bytes``, every field written)."""

    weights_bytes: int | None
    source: str  # "engine (in-memory tensors)", "gguf tensors", "declared",
    # "file size (upper bound)" or "unknown"
    embedding_bytes: int | None = None
    tied_embedding: bool | None = None
    kv_bytes_per_position: float | None = None  # all layers, K + V

    def kv_bytes_per_token(self, mean_context: float) -> float | None:
        if self.kv_bytes_per_position is None:
            return None
        return self.kv_bytes_per_position * mean_context


class Part(Section):
    """A frozen record part: unknown keys kept, optional fields written only when set."""

    model_config = ConfigDict(frozen=True, extra="allow")


class PromptFileRecord(Part):
    """A read ``--prompt-file`` as a bench's (a baseline's) config records it
    (``bench.prompt_file.read_prompt_file``): the file, its SHA-256, and its token IDs
    or its text."""

    file: str | None = None
    file_sha256: str | None = None
    token_ids: list[int] | None = None
    text: str | None = None


class SpeedDistributions(Part):
    """A case's request-weighted distributions per speed field (``runner.summary.
    SPEED_FIELDS``, in that order); only steady decode is required of a record."""

    steady_decode_tps: Distribution
    tpot_ms: Distribution | None = None
    ttft_s: Distribution | None = None
    prefill_tps: Distribution | None = None
    e2e_s: Distribution | None = None
    output_tps: Distribution | None = None

    def of(self, name: str) -> Distribution:
        """One field's distribution by name (empty where the record has none)."""
        found = getattr(self, name, None)
        return found if isinstance(found, Distribution) else Distribution()


class FidelityDistributions(Part):
    """A case's distributions of each ``bench.fidelity.FIDELITY_FIELDS`` figure."""

    engine_prefill_tps: Distribution | None = None
    engine_decode_tps: Distribution | None = None
    engine_tpot_ms: Distribution | None = None
    prefill_ratio: Distribution | None = None
    decode_ratio: Distribution | None = None
    overhead_us_per_token: Distribution | None = None


class Roofline(Part):
    """``bench.roofline.roofline``: bytes per token, the decode rate, achieved GB/s and
    its fraction of the peak, for weights alone and weights + KV cache."""

    weights_bytes_per_token: Number | None
    kv_bytes_per_token: Number | None
    bytes_per_token: Number | None
    decode_tps: Number | None
    achieved_gbps_weights: Number | None
    achieved_gbps: Number | None
    peak_gbps: Number | None
    fraction_of_peak_weights: Number | None
    fraction_of_peak: Number | None


class CaseFigures(Part):
    """One bench case: its lengths and prompt, the greedy reference (the first measured
    request's output), whether the repeats (and warm-ups) reproduced it, and the
    distributions over the measured requests."""

    input_len: StrictInt  # (strict: a baseline check re-runs these lengths)
    output_len: StrictInt
    prompt_tokens: int | None = None
    prompt_sha256: str
    output_token_ids: list[int] | None = None
    output_sha256: str | None = None
    output_text: str | None = None
    output_text_sha256: str | None = None
    outputs_identical: bool | None = None
    warmup_identical: bool | None = None
    n_warmup: int | None = None
    n: int | None = None
    concurrency: int | None = None
    throughput_tps: Distribution | None = None
    speed: SpeedDistributions
    itl_ms: Distribution | None = None
    fidelity: FidelityDistributions | None = None
    counts_match: bool | None = None

    @property
    def label(self) -> str:
        return f"{self.input_len}/{self.output_len}"

    @property
    def batch_size(self) -> int:
        """Requests in flight together (1 for a record written before batches)."""
        return self.concurrency or 1


class BenchSummaryCase(CaseFigures):
    """A case of a bench's ``summary.json``; ``roofline`` only in a complete bench."""

    roofline: Roofline | None = None


class RequestRef(Part):
    """One request of a baseline case: which it was and what it output."""

    request: str
    warmup: bool
    output_sha256: str | None


class Divergence(Part):
    """Where a request's output first leaves the reference (``unit``: ``token`` or
    ``character``); at a check, whether each side's token is in the other's top-k."""

    request: str
    position: int
    unit: str
    reference_token: int | None
    current_token: int | None
    reference_in_current_top_k: bool | None = None
    current_in_reference_top_k: bool | None = None


class RepeatAgreement(Part):
    """How many warm-up and measured requests reproduce a reference, and the first one
    that does not (``baseline.agreement.agreement``)."""

    measured: int
    measured_match: int
    warmup: int
    warmup_match: int
    all_match: bool
    first_divergence: Divergence | None
    summary: str


class BaselineCase(CaseFigures):
    """A case of ``baseline.json``: the bench figures, the reference's top-k trace and
    prompt, the per-repeat speeds, every request and whether they agreed."""

    top_k: list[list[int]] | None = None
    prompt_ids: list[int]
    decode_tps_values: list[Number | None] | None = None
    prefill_tps_values: list[Number | None] | None = None
    requests: list[RequestRef] | None = None
    repeat_agreement: RepeatAgreement | None = None

    def speed_values(self, metric: str) -> list[Number | None] | None:
        """The per-repeat values of ``steady_decode_tps`` or ``prefill_tps``."""
        return self.decode_tps_values if metric == "steady_decode_tps" \
            else self.prefill_tps_values


class ProbeRecord(Part):
    """One health probe's result (``bench.probes.ProbeResult``)."""

    name: StrictStr  # (strict: a baseline check compares probes by these)
    passed: StrictBool
    natural_eos: bool | None = None
    correct: bool | None = None
    reason: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    expected: str | None = None
    output_text: str | None = None
    params: dict[str, Any] | None = None


class BenchProbes(Part):
    """A bench summary's ``probes``: how many ran, how many passed, each result."""

    n: int
    n_passed: int
    results: list[ProbeRecord]


class GpuMemory(Section):
    """One GPU's memory while the engine was loaded (``bench.resources.gpu_memory``,
    through NVML): in total and held by the engine's processes (None: not supported)."""

    index: int | None = None
    name: str | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    process_memory_used: int | None = None


class EngineResources(Section):
    """A bench summary's ``resources`` (``bench.resources.engine_resources``): the
    engine's process, its memory and the GPUs' memory; a remote endpoint's has no
    process here (``pid`` null, and a ``note`` saying so)."""

    pid: int | None = None
    in_process: bool | None = None
    peak_rss_bytes: int | None = None
    rss_bytes: int | None = None
    gpus: list[GpuMemory] | None = None
    note: str | None = None

    @property
    def remote(self) -> bool:
        """Measured, and no engine process on this host (a remote endpoint)."""
        return "pid" in self.model_fields_set and self.pid is None


class PeakBandwidth(Section):
    """A bench summary's ``peak_bandwidth``: the peak the roofline is taken against
    (declared, or a probe's estimate: ``bench.roofline``), where it came from and how
    it was measured; ``gbps`` null (and why, in ``source``) where none could be had."""

    gbps: Number | None = None
    source: str | None = None
    method: str | None = None
    device: str | None = None  # the GPU probe's
    size_mib: int | None = None
    threads: int | None = None  # the CPU probe's
    repeats: int | None = None
    process: str | None = None  # the GPU probe run in a child process

