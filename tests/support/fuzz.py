"""Hypothesis strategies that break valid input files, and the property every loader of
user input must keep: it returns, or raises an :class:`AbgateError` with a one-line
message that names the file (never a traceback)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from abgate.errors import AbgateError

# Bounded for CI (every fuzz test together well under a minute on a busy 2-core host);
# ABGATE_FUZZ_EXAMPLES=2000 for a long run by hand.
EXAMPLES = int(os.environ.get("ABGATE_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize="ABGATE_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.filter_too_much])

SPECIALS = '"\'[]{}=,.:#\\\n\t -+0123456789eE_truefalsnul\u00e9\u2603\x00'
_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
_scalar = (st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True) | _text)
VALUES = st.recursive(_scalar, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(_text, c, max_size=3), max_leaves=6)
JSON_VALUES = st.recursive(st.none() | _scalar, lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(_text, c, max_size=3), max_leaves=6)


@st.composite
def broken_text(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` after 1-3 byte-level edits: truncation, deletion, insertion of syntax
    characters or invalid UTF-8, a replaced byte, a duplicated line."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "delete", "insert", "replace", "bad_utf8",
                                   "dup_line"]))
        if op == "truncate":
            del data[pos:]
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 20))]
        elif op == "insert":
            data[pos:pos] = draw(st.text(alphabet=SPECIALS, min_size=1, max_size=6)).encode()
        elif op == "replace" and pos < len(data):
            data[pos] = draw(st.sampled_from(SPECIALS.encode()))
        elif op == "bad_utf8":
            data[pos:pos] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"]))
        elif op == "dup_line":
            lines = bytes(data).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            data = bytearray(b"\n".join(lines[:i + 1] + lines[i:]))
    return bytes(data)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def broken_doc(draw: st.DrawFn, base: Any, values: st.SearchStrategy[Any] = VALUES) -> Any:
    """``base`` (parsed JSON/TOML) after 1-3 structural edits: a value replaced by one of
    another type, a key deleted, an unknown key added."""
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if not path:
            if op == "add" and isinstance(doc, dict):
                doc[draw(_text)] = draw(values)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if op == "replace":
            parent[path[-1]] = draw(values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(_text)] = draw(values)
    return doc


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_dumps(doc: dict[str, Any], prefix: str = "") -> str:
    """TOML for ``doc``: scalars first, then one ``[table]`` per nested table."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            name = f"{prefix}.{_key(k)}" if prefix else _key(k)
            lines += ["", f"[{name}]", toml_dumps(v, name)]
    return "\n".join(lines) + "\n"


def check_clean(load: Callable[[], Any], path: Path | str,
                names: str | None = None) -> AbgateError | None:
    """Run ``load``: it may return, or raise an AbgateError with a one-line message that
    names ``path`` (or matches the regex ``names``). Anything else (a traceback)
    propagates and fails the test."""
    try:
        load()
    except AbgateError as exc:
        msg = str(exc)
        assert msg.strip() and "\n" not in msg and "\r" not in msg, repr(msg)
        named = re.search(names, msg) if names else str(path) in msg or Path(path).name in msg
        assert named, f"{names or path} not named: {msg}"
        return exc
    return None
