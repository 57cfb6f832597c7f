"""Lenient typed views of the free-form objects inside records, read by attribute:
the one kit that the drift check (``compare.drift``) and the reports
(``report.views``) build their views from.

A view never refuses what it reads: an object of the wrong type reads as an empty one,
a list keeps only its objects, a missing field is its default and any value is kept as
written, because views read records that other code, or older versions, wrote. Keys a
view does not name are kept too. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

V = TypeVar("V", bound="View")


class View(BaseModel):
    model_config = ConfigDict(extra="allow", from_attributes=True)

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, value: Any) -> Any:
        return value if isinstance(value, Mapping | BaseModel) else {}


def _only_objects(value: Any) -> list[Any]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


Objects = Annotated[list[dict[str, Any]], BeforeValidator(_only_objects)]


def views(model: type[V], value: Any) -> list[V]:
    """The objects of the list ``value`` as ``model`` views ([] when not a list)."""
    return [model.model_validate(v) for v in _only_objects(value)]
