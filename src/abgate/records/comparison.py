"""``comparison.json`` typed (:class:`ComparisonDoc`) and its parts: the paired
comparison of two arms (:class:`Comparison`), its probe and sequential sections, and the
:class:`Verdict`. The distribution-agreement section is :mod:`abgate.records.agreement`,
the base :mod:`abgate.records.result`.

JSON only at the edges: :meth:`Result.to_json` is the record on disk (the same keys, in
the same order, as the dicts these models replaced), and ``runner.documents``'
``read_document`` reads one back. Every field has a default so that a file from an older
abgate (or one a test trimmed) still reads: a missing number is None (shown as ``n/a``), a
missing section its empty model. ``to_json`` writes the fields that were *set* (given
when the model was made, or present in the file read): a comparison made without the
A/B's extras has no ``agreement`` key, and an old file read back writes the keys it had.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from abgate.records.agreement import Agreement
from abgate.records.load_snapshots import HostLoadFinding
from abgate.records.policy import Policy
from abgate.records.result import Bounds, Gate, Result

# -- paired statistics (compare/paired.py, diagnostics.py) ----------------------------

class Interval(Result):
    estimate: float | None = None
    se: float | None = None
    ci: Bounds | None = None


class ArmAccuracy(Interval):
    ci_method: str | None = None
    n_effective: float | None = None


class McNemar(Result):
    a_only_correct: int | None = None
    b_only_correct: int | None = None
    n_discordant: int | None = None
    p_value: float | None = None


class Accuracy(Result):
    n_scored: int | None = None
    n_unscored: int | None = None
    n_items: int | None = None
    a: ArmAccuracy = Field(default_factory=ArmAccuracy)
    b: ArmAccuracy = Field(default_factory=ArmAccuracy)
    diff: Interval = Field(default_factory=Interval)
    mcnemar: McNemar = Field(default_factory=McNemar)


class PairedDelta(Result):
    """A health rate per arm (item-clustered means) and their paired difference."""

    a: float | None = None
    b: float | None = None
    n: int | None = None
    diff: Interval = Field(default_factory=Interval)


class Rates(Result):
    invalid: PairedDelta = Field(default_factory=PairedDelta)
    truncated: PairedDelta = Field(default_factory=PairedDelta)
    natural_stop: PairedDelta = Field(default_factory=PairedDelta)
    seq_rep_4: PairedDelta = Field(default_factory=PairedDelta)
    error: PairedDelta = Field(default_factory=PairedDelta)


class Quality(Result):
    accuracy: Accuracy = Field(default_factory=Accuracy)
    rates: Rates = Field(default_factory=Rates)


class ArmSpeed(Result):
    mean: float | None = None
    median: float | None = None


class LogRatio(Result):
    estimate: float | None = None
    se: float | None = None
    sd: float | None = None  # spread of the per-item log ratios (compare/explain.py)
    ci: Bounds | None = None
    ci_bootstrap: Bounds | None = None
    ci_t: Bounds | None = None
    ci_replicas: Bounds | None = None  # a fleet: replicas as clusters (compare/replicas.py)
    n_replicas: int | None = None


class Ratio(Result):
    estimate: float | None = None
    ci: Bounds | None = None


class SpeedMetric(Result):
    higher_is_better: bool | None = None
    n_pairs: int | None = None
    n_items: int | None = None
    a: ArmSpeed = Field(default_factory=ArmSpeed)
    b: ArmSpeed = Field(default_factory=ArmSpeed)
    pct_change_mean: float | None = None
    pct_change_median: float | None = None
    log_ratio: LogRatio = Field(default_factory=LogRatio)
    ratio: Ratio = Field(default_factory=Ratio)
    # samples without a measurement, by why (nan, inf, missing, not positive); if any
    unmeasured_samples: dict[str, int] | None = None


class IdenticalOutputs(Result):
    n: int | None = None
    of: int | None = None
    text: str | None = None
    fraction: float | None = None


class OutputTokens(Result):
    a_mean: float | None = None
    b_mean: float | None = None
    mean_diff: float | None = None
    mean_abs_diff: float | None = None


class ArmFloats(Result):
    a: float | None = None
    b: float | None = None


class ArmCounts(Result):
    a: int | None = None
    b: int | None = None


class ArmNames(Result):
    a: str = "A"
    b: str = "B"


class ChangeRow(Result):
    key: str | None = None
    a_tokens: int | None = None
    b_tokens: int | None = None
    a_rep: float | None = None
    b_rep: float | None = None
    a_correct: Any = None
    b_correct: Any = None
    text: str | None = None


class Diagnostics(Result):
    identical_outputs: IdenticalOutputs = Field(default_factory=IdenticalOutputs)
    prompt_mismatches: int | None = None
    output_tokens: OutputTokens = Field(default_factory=OutputTokens)
    speed_drift: ArmFloats = Field(default_factory=ArmFloats)
    largest_length_changes: tuple[ChangeRow, ...] = ()
    largest_repetition_changes: tuple[ChangeRow, ...] = ()


class Mde(Result):
    confidence: float | None = None
    power: float | None = None
    n_items: int | None = None
    accuracy_paired: float | None = None
    accuracy_unpaired: float | None = None
    discordance_upper: float | None = None
    speed: dict[str, float | None] = Field(default_factory=dict)


class Bootstrap(Result):
    seed: int | None = None
    n_boot: int | None = None
    confidence: float | None = None
    method: str | None = None


# -- probes, sequential ---------------------------------------------------------------

class ProbeRow(Result):
    name: str | None = None
    baseline: bool | None = None
    candidate: bool | None = None
    baseline_reason: str | None = None
    candidate_reason: str | None = None
    status: str | None = None


class Probes(Result):
    measured: bool = False
    reason: str | None = None
    rows: tuple[ProbeRow, ...] = ()
    n_regressions: int | None = None


class Look(Result):
    n_items: int | None = None
    decision: str | None = None


class Sequential(Result):
    measured: bool = False
    look_every: int | None = None
    max_items: int | None = None
    n_items_run: int | None = None
    looks: tuple[Look, ...] = ()
    stopped_at: int | None = None
    stopped_early: bool | None = None
    n_items: int | None = None
    decision: str | None = None
    decided_by: tuple[str, ...] = ()
    guarantee: str | None = None
    gates: tuple[Gate, ...] = ()


# -- the comparison, the verdict, comparison.json -------------------------------------

class Comparison(Result):
    """Arm B against arm A: :func:`abgate.compare.compare_samples`, then (in an A/B)
    the extras from ``expect`` on, set by :func:`abgate.ab.analyze.arm_extras`."""

    arms: ArmNames = Field(default_factory=ArmNames)
    n_pairs: int | None = None
    n_items: int | None = None
    n_items_total: int | None = None
    pairs_per_item: float | None = None
    n_excluded_errors: int | None = None
    n_unmatched: ArmCounts = Field(default_factory=ArmCounts)
    quality: Quality = Field(default_factory=Quality)
    speed: dict[str, SpeedMetric] = Field(default_factory=dict)
    diagnostics: Diagnostics = Field(default_factory=Diagnostics)
    mde: Mde = Field(default_factory=Mde)
    bootstrap: Bootstrap = Field(default_factory=Bootstrap)
    expect: str | None = None
    speed_only: str | None = None  # why quality gates do not apply (random weights)
    agreement: Agreement | None = None
    difference_warnings: tuple[str, ...] = ()
    host_load: HostLoadFinding | None = None  # abgate.host_load.summarize over the A/B
    probes: Probes | None = None
    sequential: Sequential | None = None

    def with_extras(self, **extras: Any) -> Comparison:
        """This comparison with the A/B's extras set (``expect``, ``agreement``...)."""
        unknown = set(extras) - set(type(self).model_fields)
        if unknown:
            raise ValueError(f"not a comparison field: {', '.join(sorted(unknown))}")
        return self.model_validate({**self.model_dump(exclude_unset=True), **extras})


class GateMde(Result):
    """What one gate could detect at the run's size (:mod:`abgate.compare.plan`):
    ``distance`` beyond its fail threshold, ``detectable`` the true value it fails at
    with the verdict's power (an accuracy drop, a slowdown, a KLD), in ``unit``."""

    distance: float | None = None
    detectable: float | None = None
    unit: str | None = None
    sigma: float | None = None  # per item, from the run's own SE
    bound: bool | None = None  # sigma is an upper bound (no discordant pair seen)


class VerdictMde(Result):
    """The minimum detectable effects a verdict had, gate by gate."""

    power: float | None = None
    n_items: int | None = None
    gates: dict[str, GateMde] = Field(default_factory=dict)


class Verdict(Result):
    """The decision, every gate behind it, and the sentences that explain it."""

    decision: str | None = None
    exit_code: int | None = None  # 0 ACCEPT, 1 REJECT, 3 INCONCLUSIVE (EXIT_CODES)
    reasons: tuple[str, ...] = ()
    more_samples_needed: int | None = None
    gates: tuple[Gate, ...] = ()
    policy: Policy | None = None  # the policy it was given under
    notes: tuple[str, ...] = ()
    explanation: str | None = None  # INCONCLUSIVE: why, in one line (compare/explain.py)
    mde: VerdictMde | None = None  # what each gate could detect at this run's size


class ArmResult(Result):
    """One candidate against the baseline (:func:`abgate.ab.analyze.compare_arm`)."""

    comparison: Comparison = Field(default_factory=Comparison)
    verdict: Verdict = Field(default_factory=Verdict)


class ComparisonDoc(Result):
    """``comparison.json``: every candidate's comparison and verdict, and the overall
    decision."""

    schema_version: int | None = None
    kind: str | None = None
    ab_status: str | None = None
    baseline: str | None = None
    policy: Policy | None = None  # the policy it was given under
    comparisons: dict[str, ArmResult] = Field(default_factory=dict)
    decision: str | None = None
    exit_code: int | None = None
