"""Record edits in tests go through the real models: read the document with
``read_record``/``read_document``, change attributes (``model_copy(update=...)``, or a
nested part the same way) and write it with ``write_record``, which validates it again.
A test that means to write a damaged or hostile file writes it raw, and says so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from abgate.records.documents import Document
from abgate.runner.documents import read_document, read_record, write_record

D = TypeVar("D", bound=Document)


def edit_record(path: Path, **update: Any) -> Document:
    """The record at ``path`` (run.json, ab.json, a bench's run.json, baseline.json)
    with ``update``'s attributes set, written back through ``write_record``."""
    doc = read_record(path)
    new = doc.model_copy(update=update)
    write_record(path, new)
    return new


def edit_document(path: Path, model: type[D], change: Callable[[D], D] | None = None,
                  **update: Any) -> D:
    """A JSON document (summary.json, probes.json, ...) read as ``model``, changed by
    ``change`` (a function of the model) or ``update``, written back."""
    doc = read_document(path, model)
    new = change(doc) if change is not None else doc.model_copy(update=update)
    write_record(path, new)
    return new


def changed(part: Any, **update: Any) -> Any:
    """A nested part (a section, a case) with ``update``: ``model_copy`` for a model,
    a copy of a dict otherwise (the models keep free objects as dicts)."""
    if isinstance(part, dict):
        return {**part, **update}
    return part.model_copy(update=update)


def edit_sealed(path: Path, change: Callable[[Any], Any] | None = None,
                **update: Any) -> Document:
    """A sealed record (``baseline.json``) changed as a rebuilt record would be, sealed
    again (``integrity.seal``) and written through ``write_record``: a check reads it as
    recorded (for a test of what the check decides, not of the seal)."""
    from abgate.integrity import seal

    doc = read_record(path)
    new = change(doc) if change is not None else doc.model_copy(update=update)
    sealed = type(new).model_validate(seal(new.to_dict()))
    write_record(path, sealed)
    return sealed
