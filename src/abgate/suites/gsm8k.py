"""GSM8K from a local JSONL/parquet file or the Hugging Face hub (``openai/gsm8k``).

Each record needs ``question`` and ``answer``; the answer is a worked solution ending
in ``#### N``. Errors name the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from abgate.errors import UsageError, one_line
from abgate.identity import DEFAULT_CACHE
from abgate.jsonl import json_objects
from abgate.suites.base import Item, Suite, content_id

HUB_PREFIX = "hf:"
DEFAULT_HUB_ID = "openai/gsm8k"


def _item(record: Mapping[str, Any], where: str) -> Item:
    from abgate.scoring.extract import reference_answer

    missing = [k for k in ("question", "answer") if k not in record]
    if missing:
        raise UsageError(f"{where}: missing key {missing[0]!r} (need 'question' and 'answer')")
    question, solution = record["question"], record["answer"]
    if not isinstance(question, str) or not isinstance(solution, str):
        raise UsageError(f"{where}: 'question' and 'answer' must be strings")
    try:
        value = reference_answer(solution)
    except ValueError as exc:
        raise UsageError(f"{where}: answer has no integer '#### N' final value ({exc})") from None
    return Item(id=content_id("gsm8k", question), question=question, answer=value,
                solution=solution)


def _read_jsonl(path: Path) -> list[Item]:
    return [_item(record, f"{path}:{lineno}") for lineno, record in json_objects(path)]


def _read_parquet(path: Path) -> list[Item]:
    import pyarrow.parquet as pq

    try:
        # converting to Python is part of reading: a damaged file can decode cleanly as
        # parquet and still hold a string column that is not UTF-8
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise UsageError(f"{path}: cannot read parquet ({one_line(exc)})") from None
    return [_item(rec, f"{path}:row {i}") for i, rec in enumerate(rows, 1)]


def _dedupe(items: Iterable[Item], source: str) -> tuple[Item, ...]:
    seen: dict[str, Item] = {}
    for item in items:
        seen.setdefault(item.id, item)  # duplicate questions: keep the first
    if not seen:
        raise UsageError(f"{source}: no items")
    return tuple(seen.values())


def load_local(path: Path) -> Suite:
    if not path.exists():
        raise UsageError(f"data file not found: {path}")
    if path.suffix == ".parquet":
        items = _read_parquet(path)
    elif path.suffix in (".jsonl", ".json"):
        items = _read_jsonl(path)
    else:
        raise UsageError(f"{path}: unsupported data format (expected .jsonl or .parquet)")
    digest = DEFAULT_CACHE.hash(path).sha256
    return Suite("gsm8k", _dedupe(items, str(path)), str(path), digest)


def load_hub(spec: str, split: str = "test") -> Suite:
    """``hf:openai/gsm8k`` (config ``main``). Needs the ``datasets`` extra. ``spec`` may also
    name a local dataset directory, which ``datasets.load_dataset`` reads the same way."""
    try:
        import datasets
    except ImportError:
        raise UsageError(
            "loading GSM8K from the Hugging Face hub needs the 'datasets' extra: "
            "pip install 'abgate[datasets]' (or pass --data PATH.jsonl)"
        ) from None
    name = spec[len(HUB_PREFIX):] if spec.startswith(HUB_PREFIX) else spec
    config = "main" if name == DEFAULT_HUB_ID else None
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # network, missing split, bad layout: all one line for the user
        raise UsageError(f"cannot load dataset {name!r} split {split!r}: {exc}") from None
    fingerprint = getattr(ds, "_fingerprint", None)
    items = (_item(rec, f"{name}[{split}] row {i}") for i, rec in enumerate(ds, 1))
    return Suite("gsm8k", _dedupe(items, name), f"{HUB_PREFIX}{name}:{split}",
                 f"hf-fingerprint:{fingerprint}" if fingerprint else None)


def load(data: str | None) -> Suite:
    if data is None:
        return load_hub(HUB_PREFIX + DEFAULT_HUB_ID)
    if data.startswith(HUB_PREFIX):
        return load_hub(data)
    return load_local(Path(data))
