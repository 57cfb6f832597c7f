"""Typed views of the free-form objects inside the records, read by attribute: a GPU,
an arm's settings, a weights diff (the recorded policy is its record model,
``records.policy.Policy``).

Built on ``compare.views`` (a view never refuses what it reads: the renderers format
any value kept as written, or print ``n/a``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from abgate.compare.views import Objects, View, views
from abgate.report.fmt import NA


class Gpu(View):
    """A GPU as ``host_info`` lists it (an NVML object)."""

    name: Any = "GPU"


class ArmSetting(View):
    """What the limits cite of an arm's table in the experiment file
    (``runner.spec.RunConfig.to_dict``) or of its recorded ``spec.sampling``."""

    suite: Any = None
    limit: Any = NA  # (not recorded: not known)
    seeds: Any = None
    temperature: Any = None
    max_tokens: Any = None


class CheckpointRef(View):
    path: Any = NA
    sha256: Any = NA


class WeightsOverall(View):
    pooled_rel_l2: Any = None
    pooled_sqnr_db: Any = None
    max_rel_l2: Any = None


class WeightsSummary(View):
    overall: WeightsOverall = Field(default_factory=WeightsOverall)
    n_compared: Any = None


class TensorDiffView(View):
    name: Any = NA
    status: Any = None
    rel_l2: Any = None
    sqnr_db: Any = None

    @property
    def compared(self) -> bool:
        return self.status == "compared" and isinstance(self.rel_l2, int | float)


class WeightsDiff(View):
    """A ``weights-diff*.json`` (``abgate weights-diff --json``)."""

    ref: CheckpointRef = Field(default_factory=CheckpointRef)
    other: CheckpointRef = Field(default_factory=CheckpointRef)
    summary: WeightsSummary = Field(default_factory=WeightsSummary)
    tensors: Objects = []

    def worst(self, n: int) -> list[TensorDiffView]:
        """The ``n`` compared tensors of largest relative L2, largest first."""
        compared = [t for t in views(TensorDiffView, self.tensors) if t.compared]
        return sorted(compared, key=lambda t: -float(t.rel_l2))[:n]
