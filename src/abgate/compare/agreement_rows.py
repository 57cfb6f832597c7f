"""One ``agreement.jsonl`` line as a typed model (pure): what the A/B scoring pass
writes (``ab.evidence.agreement_row``) and what :mod:`abgate.compare.agreement` and
:mod:`abgate.compare.sequential` read.

A row is the candidate against the baseline on one (item, seed) sequence: the scored
tokens, the per-position KL(baseline || candidate), both arms' argmax token, both arms'
log-probability of the scored token and their top tokens. Written as its
``model_dump(mode="json")`` (the keys in the order declared here, ``k`` null for the
``full`` method). Read leniently (:func:`agreement_row_of`): a field of an older or
damaged file that does not fit its type reads as missing and a non-number in a float
array as None, so :meth:`AgreementRow.problem` can name what is wrong and the analysis
counts the row instead of failing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from abgate.schema import refused_fields

__all__ = ["METHODS", "AgreementRow", "agreement_row_of"]

METHODS = ("full", "top_k")
_ARRAYS = ("kl", "top1_base", "top1_cand", "logp_base", "logp_cand")
_FLOAT_ARRAYS = ("kl", "logp_base", "logp_cand")


class AgreementRow(BaseModel):
    """One scored sequence; every field optional on read (an old row may lack it)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    key: str | None = None
    item_id: str | None = None
    seed: int | None = None
    source: str | None = None
    method: str | None = None
    k: int | None = None
    tokens: list[int] | None = None
    kl: list[float | None] | None = None
    top1_base: list[int] | None = None
    top1_cand: list[int] | None = None
    logp_base: list[float | None] | None = None
    logp_cand: list[float | None] | None = None
    top_base: list[Any] | None = None
    top_cand: list[Any] | None = None

    @property
    def row_key(self) -> str:
        """The (item, seed) key; rows without one are keyed ``item_id#seed``."""
        return str(self.key or f"{self.item_id}#{self.seed if self.seed is not None else 0}")

    @property
    def row_item(self) -> str:
        """The item id; rows without one take it from the key."""
        return self.item_id if self.item_id is not None else self.row_key.rsplit("#", 1)[0]

    def problem(self) -> str | None:
        """Why the row cannot be summarized (a method not known, an array missing or
        of another length than the tokens), or None."""
        if self.method not in METHODS:
            return f"method {self.method!r} is not 'full' or 'top_k'"
        if self.tokens is None:
            return "'tokens' is not a list"
        for name in _ARRAYS:
            values = getattr(self, name)
            if values is None or len(values) != len(self.tokens):
                size = len(values) if values is not None else "no"
                return f"'{name}' has {size} values for {len(self.tokens)} tokens"
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def agreement_row_of(row: AgreementRow | Mapping[str, Any]) -> AgreementRow:
    """``row`` (a line as read, or a model) as an :class:`AgreementRow`, leniently: a
    non-number in a float array reads as None (NaN in the analysis), and a field that
    still does not fit its type reads as missing (so :meth:`~AgreementRow.problem`
    names it)."""
    if isinstance(row, AgreementRow):
        return row
    data = dict(row)
    for name in _FLOAT_ARRAYS:
        values = data.get(name)
        if isinstance(values, list):
            data[name] = [_number(v) for v in values]
    for _ in range(len(AgreementRow.model_fields) + 1):
        try:
            return AgreementRow.model_validate(data)
        except ValidationError as exc:
            for name in refused_fields(exc):
                data.pop(name, None)
    return AgreementRow()
