"""What the analysis of an A/B reads of its ``ab.json``, typed: :class:`AbView`.

``ab.json`` is validated as a record by :func:`abgate.runner.documents.read_record`;
its ``experiment``, ``scoring`` and ``differences`` are free-form there. This is the
one place the analysis (``ab.analyze``, ``ledger.compare``, the sequential looks of
``ab.run``) turns them into fields: :func:`ab_view`. Every field has a default, so a
record from an older abgate (or a partial one a test builds) reads, and unknown keys
are ignored. When the record documents type ``experiment`` themselves, this view is
what they replace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from abgate.errors import UsageError

__all__ = ["LOAD_FORMAT", "AbView", "ScoringRun", "ab_view"]

LOAD_FORMAT = "load_format"  # an engine arg; "dummy": random weights (vLLM, transformers)


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ScoringRun(_View):
    """One arm's entry of the ``scoring`` section: the scoring pass as recorded."""

    seconds: float | None = None
    n_tokens: int | None = None
    max_tokens_per_sequence: int | None = None
    n_sequences: int | None = None
    prompts_restored: int | None = None
    method: str | None = None
    error: str | None = None
    reason: str | None = None


class _Arm(_View):
    engine_args: dict[str, Any] | None = None


class _Schedule(_View):
    stopping: str | None = None  # "sequential", else a fixed-N A/B
    look_every: int | None = None


class _Evidence(_View):
    agreement: bool | None = True


class _Experiment(_View):
    arms: dict[str, _Arm] = Field(default_factory=dict)  # in file order
    baseline: str | None = None
    policy: str | None = None
    expect: str = "lossy"
    schedule: _Schedule = Field(default_factory=_Schedule)
    evidence: _Evidence = Field(default_factory=_Evidence)


class _Engine(_View):
    effective_config: dict[str, Any] | None = None


class _Run(_View):
    mode: str | None = None  # how the arms were scheduled: interleave, blocks


class _Sequential(_View):
    max_items: int | None = None  # as run


class AbView(_View):
    """The parts of ``ab.json`` the analysis reads."""

    status: str | None = None
    experiment: _Experiment = Field(default_factory=_Experiment)
    schedule: _Run = Field(default_factory=_Run)
    engines: dict[str, _Engine] = Field(default_factory=dict)
    scoring: dict[str, ScoringRun] = Field(default_factory=dict)
    differences: dict[str, dict[str, Any] | None] = Field(default_factory=dict)
    sequential: _Sequential | None = None
    host_load: dict[str, Any] | None = None
    fleet: dict[str, Any] | None = None  # a fleet A/B (abgate.fleet)

    def scoring_of(self, arm: str) -> ScoringRun:
        return self.scoring.get(arm) or ScoringRun()

    def load_formats(self, arm: str, effective: Mapping[str, Any] | None = None
                     ) -> tuple[tuple[str, Any], ...]:
        """(where, value) of ``load_format`` in the arm's effective config (``effective``:
        its run.json's effective facet; a v1 ab.json's own copy otherwise), then its
        engine args (``"dummy"``: random weights)."""
        engine = self.engines.get(arm)
        config = self.experiment.arms.get(arm)
        if effective is None:
            effective = (engine.effective_config if engine else None) or {}
        found = (("effective config", effective),
                 ("engine args", (config.engine_args if config else None) or {}))
        return tuple((where, args.get(LOAD_FORMAT)) for where, args in found)


def _none_to_default(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``null`` sections read as absent (an A/B that never scored records none)."""
    return {k: v for k, v in doc.items() if v is not None}


def ab_view(doc: AbView | Mapping[str, Any], where: str = "ab.json") -> AbView:
    """``doc`` (an ``ab.json`` document) as an :class:`AbView`; a field of the wrong
    type is one line naming ``where`` and the field."""
    if isinstance(doc, AbView):
        return doc
    try:
        return AbView.model_validate(_none_to_default(doc))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"{where}: {field}: {first['msg']}") from None
