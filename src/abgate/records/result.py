"""The base of the compare layer's results (:class:`Result`: frozen, JSON only at the
edges), a decision input (:class:`Gate`) and the decisions with their exit codes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ACCEPT", "EXIT_CODES", "INCONCLUSIVE_DECISION", "REJECT", "Bounds", "Gate",
           "Result"]

ACCEPT, REJECT, INCONCLUSIVE_DECISION = "ACCEPT", "REJECT", "INCONCLUSIVE"
EXIT_CODES = {ACCEPT: 0, REJECT: 1, INCONCLUSIVE_DECISION: 3}

Bounds = tuple[float | None, float | None]


class Result(BaseModel):
    """Base of every compare result: frozen, unknown keys of newer files ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    def to_json(self) -> dict[str, Any]:
        """The JSON record (the fields that were set, nested models included)."""
        return self.model_dump(mode="json", exclude_unset=True)


@dataclass(frozen=True)
class Gate:
    """One decision input. ``threshold`` is where it passes (``fail_threshold`` where it
    fails, when different); ``observed`` and ``ci`` are in the same units."""

    name: str
    metric: str
    threshold: float | None
    observed: float | None
    ci: tuple[float | None, float | None] | None
    outcome: str
    evidence: str
    fail_threshold: float | None = None
    more_items_needed: int | None = None
    out_of_reach: bool = False
