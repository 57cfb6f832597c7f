"""Typed configuration: strict value types for abgate's pydantic config models, and the
one place a pydantic ``ValidationError`` becomes abgate's one-line ``UsageError``.

Config models (``RunConfig``, an experiment's tables, ``BenchConfig``, the openai
engine's options, the transformers engine's args, a policy file) are pydantic
dataclasses with ``extra="forbid"`` (:data:`FORBID`) whose fields use the strict types
here: an int is never a bool, a string is never a number, a float takes an int (as
TOML writes ``1`` for ``1.0``). :func:`validated` checks a table against a model;
every failure, wherever it is found, goes through :func:`usage_error`: the file (and
``file:line`` when the table came from a :class:`~abgate.tomlfile.TomlDoc`), the key
path and, for a misspelt key, the close matches.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ConfigDict, Strict, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from abgate.errors import UsageError, did_you_mean
from abgate.tomlfile import TomlDoc

FORBID = ConfigDict(extra="forbid")

Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]  # an int is taken (and made a float)
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
Table = Annotated[dict[str, Any], Strict()]
StrTable = Annotated[dict[str, Str], Strict()]

T = TypeVar("T")


def _sequence(value: Any) -> Any:
    """A list (or tuple) for a tuple field: TOML and JSON write lists; a string or a
    table is not a list of anything."""
    if isinstance(value, list | tuple):
        return tuple(value)
    raise PydanticCustomError("abgate_type", "a list")


def _string(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise PydanticCustomError("abgate_type", "str")


LISTED = BeforeValidator(_sequence)  # before a tuple field: a list (or tuple) only
IntList = Annotated[tuple[Int, ...], LISTED]
StrList = Annotated[tuple[Str, ...], LISTED]


# Before a ``Literal`` of strings: a value that is no string "must be str" (a misspelt
# one gets the close matches): ``Annotated[Literal["a", "b"], TEXT]``.
TEXT = BeforeValidator(_string)


def refuse(message: str, key: str | None = None) -> PydanticCustomError:
    """An error for a model's own check: ``message`` (naming the key) is shown as it is,
    after the file and table; ``key``: the key it is about, for the file's line."""
    return PydanticCustomError("abgate", message.replace("{", "{{").replace("}", "}}"),
                               {"key": key} if key else None)


def checked(check: Callable[[Any], str | None]) -> BeforeValidator:
    """A value ``check`` approves first (it returns None, or what the value must be:
    "must be a number in (0, 1)"), shown as "KEY must be ..., got VALUE":
    ``Annotated[float, checked(_unit)]``."""
    def run(value: Any) -> Any:
        problem = check(value)
        if problem:
            raise PydanticCustomError("abgate_check", "{problem}", {"problem": problem})
        return value
    return BeforeValidator(run)


@dataclass(frozen=True)
class Style:
    """How a family of messages names things: ``noun`` for an unknown entry ("key",
    "option"), ``must`` before a type ("must be", "expects"), ``dotted``: the key as a
    dotted path ("speed.metric", policies) rather than the table in brackets and the
    key alone ("[arms.q8]: 'engine_args' ...")."""

    noun: str = "key"
    must: str = "must be"
    dotted: bool = False
    prefix: str = ""


KEYS = Style()

_TYPES = {"int_type": "int", "int_parsing": "int", "int_from_float": "int",
          "float_type": "float", "float_parsing": "float", "string_type": "str",
          "bool_type": "bool", "bool_parsing": "bool", "tuple_type": "a list",
          "list_type": "a list"}
_TABLES = ("dict_type", "dataclass_type", "dataclass_exact_type", "model_type",
           "model_attributes_type")
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")


def validated(kind: type[T], data: Any, where: str, *, doc: TomlDoc | None = None,
              at: Sequence[str] = (), style: Style = KEYS) -> T:
    """``data`` as a ``kind`` (a pydantic dataclass), or a one-line UsageError naming
    ``where`` (``doc``'s ``file:line`` when given), the key path under ``at`` and the
    problem."""
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        head = _where(where, doc, at, table=() if style.dotted else at)
        raise UsageError(f"{style.prefix}{head}: must be a table, got {_shown(data)}")
    try:
        value: T = _adapter(kind).validate_python(dict(data))
    except ValidationError as exc:
        raise usage_error(exc, kind, where, doc=doc, at=at, style=style) from None
    return value


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(kind: Any) -> TypeAdapter[Any]:
    """One validator per model, built on first use."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def built(kind: Callable[..., T], where: str, values: Mapping[str, Any],
          doc: TomlDoc | None = None) -> T:
    """``kind(**values)`` (a config made in code: CLI flags, a file's tables merged), a
    bad value a one-line UsageError naming ``where`` (``doc``: the file, for lines)."""
    try:
        return kind(**values)
    except ValidationError as exc:
        raise usage_error(exc, kind, where, doc=doc) from None


def replaced(obj: T, where: str, /, **changes: Any) -> T:
    """``dataclasses.replace(obj, **changes)`` (which validates again), a bad value a
    one-line UsageError naming ``where`` (the flags that gave it)."""
    try:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    except ValidationError as exc:
        raise usage_error(exc, type(obj), where) from None


@dataclass(frozen=True)
class FirstError:
    """A pydantic error's first problem, for a reader with messages of its own: where
    (``a.b[0].c``), pydantic's error type, the value it refused and the context."""

    path: str  # a.b[0].c
    type: str
    value: Any
    expected: str | None  # a literal's choices, as pydantic words them
    message: str  # pydantic's own words
    dotted: str  # a.b.0.c ("" at the top level)


def first_error(exc: ValidationError) -> FirstError:
    """The first problem of ``exc``, located as a key path with list indices (``path``)
    and as pydantic's dotted location (``dotted``), with pydantic's message."""
    err = exc.errors(include_url=False)[0]
    loc = err["loc"]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    return FirstError(path.lstrip("."), err["type"], err.get("input"),
                      (err.get("ctx") or {}).get("expected"), err["msg"],
                      ".".join(str(p) for p in loc))


def refused_fields(exc: ValidationError) -> list[str]:
    """The top-level fields ``exc`` refused (each error's first location), in its order."""
    return [str(err["loc"][0]) for err in exc.errors(include_url=False)]


def usage_error(exc: ValidationError, kind: Any, where: str, *, doc: TomlDoc | None = None,
                at: Sequence[str] = (), style: Style = KEYS) -> UsageError:
    """The one-line UsageError for ``exc`` (its first error), raised while validating a
    ``kind`` found at key path ``at`` of ``where``."""
    err = exc.errors(include_url=False)[0]
    about = (err.get("ctx") or {}).get("key")  # a model's own check names its key
    at_err = (*err["loc"], about) if about else tuple(err["loc"])
    loc = (*at, *at_err)
    last = max((i for i, p in enumerate(at_err) if isinstance(p, str)), default=-1)
    tables = [str(p) for p in at_err[:max(last, 0)]]
    key = "".join(str(p) if i == last else f"[{p}]"
                  for i, p in enumerate(at_err) if i >= last >= 0)
    parent = _type_at(kind, tables)
    table_loc = (*at, *tables)
    shown_key = ".".join([*table_loc, key]) if style.dotted and key else key
    message = _message(err, shown_key, key, parent, style)
    head = _where(where, doc, loc, table=() if style.dotted else table_loc)
    return UsageError(f"{style.prefix}{head}: {message}")


def _message(err: Any, key: str, last: str, parent: Any, style: Style) -> str:
    """The problem, naming ``key`` (``last``: its own name, for the close matches)."""
    kind, value = err["type"], err.get("input")
    named = f"{style.noun} {key!r}" if style.noun != "key" else repr(key)
    if not key:
        return str(err["msg"]) if kind.startswith("abgate") else f"invalid: {err['msg']}"
    if kind in _UNKNOWN:
        return f"unknown {style.noun} {key!r}" + did_you_mean(last, _field_names(parent))
    if kind in ("missing", "missing_argument"):
        return f"missing {style.noun} {key!r}"
    if kind == "abgate_check":
        return f"{key} {err['msg']}, got {_shown(value)}"
    if kind.startswith("abgate"):
        return (f"{named} {style.must} {err['msg']}, got {_shown(value)}"
                if kind == "abgate_type" else str(err["msg"]))
    if kind in _TYPES:
        return f"{named} {style.must} {_TYPES[kind]}, got {_shown(value)}"
    if kind in _TABLES:
        return f"{named} {style.must} a table, got {_shown(value)}"
    if kind == "literal_error":
        choices = [str(c) for c in typing.get_args(_type_at(parent, [last]))]
        return (f"{key} {_shown(value)} is not one of {', '.join(choices)}"
                + (did_you_mean(value, choices) if isinstance(value, str) else ""))
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
              "less_than": "<"}
    if kind in bounds:
        limit = next(iter(err.get("ctx", {}).values()))
        return f"{key} must be {bounds[kind]} {limit}, got {_shown(value)}"
    return f"{named}: {err['msg']}"


def _where(where: str, doc: TomlDoc | None, loc: Sequence[Any],
           table: Sequence[str] = ()) -> str:
    line = doc.line_of(loc) if doc is not None else None
    head = f"{where}:{line}" if line else where
    return f"{head} [{'.'.join(table)}]" if table else head


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unwrap(kind: Any) -> Any:
    """The model type inside ``Optional[X]``, ``Annotated[X, ...]``, ``dict[str, X]``."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            kind = args[0] if len(args) == 1 else kind
            if len(args) != 1:
                return kind
        else:
            return kind


def _type_at(kind: Any, path: Sequence[str]) -> Any:
    """The type at key ``path`` below ``kind`` (through dataclass fields and tables)."""
    for part in path:
        kind = _unwrap(kind)
        fields = getattr(kind, "__pydantic_fields__", None)
        if fields is not None and part in fields:
            kind = fields[part].annotation
        elif typing.get_origin(kind) is dict:
            kind = typing.get_args(kind)[1]
        else:
            return None
    return _unwrap(kind)


def _field_names(kind: Any) -> list[str]:
    if dataclasses.is_dataclass(kind):
        return [f.name for f in dataclasses.fields(kind)]
    return list(getattr(kind, "__pydantic_fields__", {}))
