"""The ``vllm`` engine's argument specs, read from the installed vLLM's
``EngineArgs`` dataclass on first use (so they track its version); the dataclass
annotations become typed :class:`~abgate.engines.args.ArgSpec` checks."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from abgate.engines.args import ArgSpec
from abgate.errors import UsageError

INSTALL_HINT = "the vllm engine needs vLLM: pip install 'abgate[vllm]' (on a machine vLLM supports)"
_EXCLUDED = frozenset({"model"})  # given with --model


# -- engine-arg specs from vLLM's EngineArgs dataclass ---------------------------------


def spec_for(name: str, annotation: Any, help_text: str = "") -> ArgSpec:
    """An :class:`ArgSpec` for one dataclass field's type annotation."""
    nullable = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(members) < len(typing.get_args(annotation))
        if len(members) != 1:
            return ArgSpec(name, object, help_text, nullable=True)
        annotation = members[0]
        origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        if all(isinstance(v, str) for v in values):
            return ArgSpec(name, str, help_text, nullable, {v.lower(): v for v in values})
        return ArgSpec(name, object, help_text, nullable=True)
    if annotation in (bool, int, float, str):
        return ArgSpec(name, annotation, help_text, nullable)
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        return ArgSpec(name, list, help_text, nullable)
    if origin in (dict, Mapping) or annotation is dict:
        return ArgSpec(name, dict, help_text, nullable)
    return ArgSpec(name, object, help_text, nullable=True)  # config objects, enums, ...


def specs_from_dataclass(cls: type, exclude: frozenset[str] = _EXCLUDED) -> dict[str, ArgSpec]:
    """One spec per dataclass field, from its resolved type hints where they resolve."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {}
    specs = {}
    for f in dataclasses.fields(cls):
        if f.name in exclude or f.name.startswith("_"):
            continue
        annotation = hints.get(f.name, f.type)
        if isinstance(annotation, str):
            annotation = _SIMPLE.get(annotation.replace(" ", ""), Any)
        specs[f.name] = spec_for(f.name, annotation)
    return specs


_SIMPLE: Mapping[str, Any] = {
    "bool": bool, "int": int, "float": float, "str": str,
    "Optional[bool]": bool | None, "Optional[int]": int | None, "Optional[float]": float | None,
    "Optional[str]": str | None, "bool|None": bool | None, "int|None": int | None,
    "float|None": float | None, "str|None": str | None,
}


class _EngineArgSpecs(Mapping[str, ArgSpec]):
    """``ARG_SPECS``, built from the installed vLLM on first use."""

    def __init__(self) -> None:
        self._specs: dict[str, ArgSpec] | None = None

    def _load(self) -> dict[str, ArgSpec]:
        if self._specs is None:
            try:
                from vllm.engine.arg_utils import EngineArgs
            except ImportError:
                raise UsageError(INSTALL_HINT) from None
            self._specs = specs_from_dataclass(EngineArgs)
        return self._specs

    def __getitem__(self, key: str) -> ArgSpec:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


ARG_SPECS: Mapping[str, ArgSpec] = _EngineArgSpecs()
