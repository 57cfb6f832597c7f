"""The run directory: ``run.json``, ``samples.jsonl``, ``summary.json``.

- ``samples.jsonl`` is append-only: each line is written, flushed and fsynced as its
  sample finishes, so a crash loses at most the sample in flight. A torn last line
  (a crash mid-write) is cut before anything is appended, its bytes kept in
  ``samples.jsonl.torn`` (:mod:`abgate.jsonl_append`); a bad line anywhere else is
  corruption and is refused.
- ``run.json`` and ``summary.json`` are replaced atomically (write, fsync, rename), by
  :func:`abgate.runner.documents.write_record`.
- Every document carries ``schema_version``; a newer version than this build knows is
  refused with a clear message instead of being misread.
- Documents pass through :func:`abgate.redact.redact` as they are written (a sample's
  ``error`` text through ``redact_text``; its prompt and output keep their words, only
  token-shaped secrets replaced, ``redact_sample_texts``):
  whatever a record was built from, no secret reaches the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from abgate import safefs, safejson
from abgate.errors import AbgateError
from abgate.jsonl_append import repair_torn, torn_start
from abgate.records.facts import iter_diff as iter_diff  # the one differ (records/facts.py)
from abgate.records.migrations import Stamp
from abgate.redact import redact_sample_texts, redact_text
from abgate.safejson import parse, read_bytes

SCHEMA_VERSION = 1
RUN_FILE, SAMPLES_FILE, SUMMARY_FILE, LOG_FILE = (
    "run.json", "samples.jsonl", "summary.json", "run.log")


def check_schema(doc: Mapping[str, Any], where: Path) -> None:
    version = Stamp.of(doc).schema_version
    if not isinstance(version, int):
        raise AbgateError(f"{where}: no schema_version; not an abgate record")
    if version > SCHEMA_VERSION:
        raise AbgateError(
            f"{where}: schema_version {version} is newer than this abgate understands "
            f"({SCHEMA_VERSION}); upgrade abgate to read it")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object of abgate's (a version newer than 1 refused). Typed documents read
    through :func:`abgate.runner.documents.read_record`, each with its own version."""
    doc = read_json_object(path)
    check_schema(doc, path)
    return doc


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; anything else is a one-line AbgateError."""
    doc = safejson.read_json(path, error=AbgateError)
    if not isinstance(doc, dict):
        raise AbgateError(f"{path}: expected a JSON object")
    return doc


def read_samples(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """All complete sample lines. A torn final line is ignored (and cut off when
    ``repair``); an unreadable line before the end raises."""
    return [rec for _, rec in read_sample_lines(path, repair)]


def read_sample_lines(path: Path, repair: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """:func:`read_samples` with each sample's line number (for file:line errors). The
    torn tail is that of :func:`abgate.jsonl_append.torn_start` (cut, its bytes kept in
    ``<file>.torn``, when ``repair``)."""
    if not path.exists():
        return []
    data = read_bytes(path, error=AbgateError)
    start = torn_start(data)
    if start is not None:
        if repair:
            repair_torn(path)
        data = data[:start]
    samples: list[tuple[int, dict[str, Any]]] = []
    for i, raw in enumerate(data.rstrip().split(b"\n") if data.strip() else []):
        try:
            rec = parse(raw.decode("utf-8"))
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except (ValueError, RecursionError):
            raise AbgateError(f"{path}:{i + 1}: corrupt sample line") from None
        samples.append((i + 1, rec))
    return samples


class SampleWriter:
    """Appends one JSON line per finished sample, fsynced before returning: a model (a
    ``records.samples.Sample``, a bench's ``BenchSample`` or ``ProbeLine``, an agreement
    row), written as its ``model_dump(mode="json")`` (secrets redacted on the way)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        repair_torn(path)  # the next line starts on its own, never glued onto a torn one
        try:
            self._f: IO[str] = safefs.open_text_append(path)
        except OSError as exc:
            raise AbgateError(f"{path}: cannot open for appending ({exc.strerror or exc})"
                              ) from exc

    def append(self, model: BaseModel) -> None:
        record: dict[str, Any] = model.model_dump(mode="json")
        record = redact_sample_texts({  # the error whole (redact_text), the rest by shape
            key: redact_text(value) if key == "error" and isinstance(value, str) else value
            for key, value in record.items()})
        try:
            self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as exc:  # the samples before this one are complete lines
            raise AbgateError(f"{self.path}: cannot append a sample "
                              f"({exc.strerror or exc})") from exc

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
