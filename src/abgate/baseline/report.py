"""``abgate baseline check``'s report, typed: one :class:`CheckRow` per recorded case
(tokens, the first divergence, speed against the recorded repeats), one
:class:`ProbeCheck` per probe; :meth:`CheckReport.document` is the ``--json`` report,
its keys in the order abgate has always written them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from abgate.bench import limits
from abgate.compare.drift import Drift
from abgate.records.bench_sections import Divergence, Part, RepeatAgreement
from abgate.records.load_snapshots import HostLoadCheck
from abgate.records.sections import Number, Provenance


class SpeedRow(Part):
    """A case's speed against the recorded repeats: the metric compared, both medians
    and every value, the tolerance, then ``compare.speed_check.SpeedCheck``'s figures."""

    metric: str
    recorded_median: Number | None
    current_median: Number | None
    recorded_values: list[Number | None]
    current_values: list[Number | None]
    tolerance: Number
    outcome: str
    ratio: Number | None
    low: Number | None
    high: Number | None
    recorded_spread: Number | None
    current_spread: Number | None
    reason: str
    ok: bool


class CheckRow(Part):
    """One recorded case re-run: its tokens (every warm-up and repeat) and speed;
    ``divergence`` (with the top-k cross-check) only where a request diverged."""

    case: str
    prompt_sha256: str
    compared_by: str
    tokens_match: bool
    repeats: RepeatAgreement
    divergence: Divergence | None = None
    speed: SpeedRow
    passed: bool


class ProbeCheck(Part):
    """One probe, recorded against now; ``ok`` unless a recorded pass now fails."""

    name: str
    recorded: bool
    current: bool
    reason: str | None
    ok: bool


class CheckReportDoc(Part):
    """``abgate baseline check --json``: the report as written (an unmeasured host load
    and an unrecorded provenance are empty objects)."""

    passed: bool
    speed_inconclusive: bool
    configuration: dict[str, Any]  # compare.drift.Drift's JSON
    cases: list[CheckRow]
    probes: list[ProbeCheck]
    host_load: HostLoadCheck
    provenance: Provenance
    cleanup: dict[str, Any] | None
    not_certified: list[str]


@dataclass
class CheckReport:
    passed: bool = True
    cases: list[CheckRow] = field(default_factory=list)
    probes: list[ProbeCheck] = field(default_factory=list)
    host_load: HostLoadCheck | None = None
    configuration: Drift = field(default_factory=lambda: Drift(()))  # against the record
    provenance: Provenance | None = None  # the load's, as the check recorded it
    cleanup: dict[str, Any] | None = None

    @property
    def speed_inconclusive(self) -> bool:
        return any(c.speed.outcome == "inconclusive" for c in self.cases)

    def document(self) -> CheckReportDoc:
        """The ``--json`` report, its keys in the order abgate has always written them."""
        return CheckReportDoc(passed=self.passed, speed_inconclusive=self.speed_inconclusive,
                              configuration=self.configuration.to_dict(),
                              cases=self.cases, probes=self.probes,
                              host_load=self.host_load or HostLoadCheck(),
                              provenance=self.provenance or Provenance(),
                              cleanup=self.cleanup, not_certified=list(limits.BASELINE))

