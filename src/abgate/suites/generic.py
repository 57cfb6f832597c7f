"""The generic suite: a user's JSON Lines file of prompts and text answers.

Each line is an object::

    {"prompt": "Capital of France? One word.", "answer": "Paris"}
    {"id": "q2", "prompt": "Name a prime above 10.", "answer": "\\b(11|13|17|19)\\b",
     "scorer": "regex"}

``prompt`` (or ``question``) is sent as the user message as written (no instruction is
added); ``answer`` is the reference text, scored by ``scorer``: ``exact`` (the default:
the stripped output equals the stripped answer) or ``regex`` (``re.search`` of the
answer as a pattern). ``id`` is optional (default: a hash of the prompt) and must be
unique. Every bad row is a one-line error naming ``file:line``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from abgate.errors import UsageError, did_you_mean
from abgate.identity import DEFAULT_CACHE
from abgate.jsonl import json_objects
from abgate.scoring.text import SCORERS, TextScorer
from abgate.suites.base import Item, Suite, content_id

NAME = "jsonl"
KEYS = ("id", "prompt", "question", "answer", "scorer")


def _text(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record[key]
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def _scorer(record: Mapping[str, Any], answer: str, where: str) -> TextScorer:
    kind = record.get("scorer", "exact")
    if kind not in SCORERS:
        hint = did_you_mean(kind, SCORERS) if isinstance(kind, str) else ""
        raise UsageError(f"{where}: scorer {kind!r} is not one of "
                         f"{', '.join(SCORERS)}{hint}")
    if kind == "regex":
        try:
            re.compile(answer)
        except re.error as exc:
            raise UsageError(f"{where}: answer is not a valid regex ({exc})") from None
        return TextScorer("regex", answer)
    return TextScorer("exact", answer)


def _item(record: Mapping[str, Any], where: str) -> Item:
    unknown = [k for k in record if k not in KEYS]
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r}"
                         + did_you_mean(unknown[0], KEYS))
    field = "prompt" if "prompt" in record else "question"
    for key in (field, "answer"):
        if key not in record:
            raise UsageError(f"{where}: missing key {key!r} (need 'prompt' and 'answer')")
    prompt, answer = _text(record, field, where), _text(record, "answer", where)
    item_id = _text(record, "id", where) if "id" in record else content_id(NAME, prompt)
    return Item(id=item_id, question=prompt, answer=0, scorer=_scorer(record, answer, where))


def load(data: str | None) -> Suite:
    """The items of ``data``, a ``.jsonl`` file."""
    if data is None:
        raise UsageError("the jsonl suite needs --data FILE.jsonl (one {\"prompt\", "
                         "\"answer\"} object a line)")
    path = Path(data)
    if not path.is_file():
        raise UsageError(f"data file not found: {path}")
    items: list[Item] = []
    seen: dict[str, int] = {}
    for lineno, record in json_objects(path):
        item = _item(record, f"{path}:{lineno}")
        if item.id in seen:
            raise UsageError(f"{path}:{lineno}: duplicate id {item.id!r} (first on line "
                             f"{seen[item.id]})")
        seen[item.id] = lineno
        items.append(item)
    if not items:
        raise UsageError(f"{path}: no items")
    return Suite(NAME, tuple(items), str(path), DEFAULT_CACHE.hash(path).sha256)
