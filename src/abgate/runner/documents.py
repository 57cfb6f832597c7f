"""Record documents made, written and read in one place (the models are
:mod:`abgate.records.documents`).

:func:`new_record` makes a record model; :func:`write_record` writes any document (a
record or a JSON document) after validating it again (a writer's bug never reaches the
disk), whole or not at all (:func:`write_json_atomic`); :func:`read_record` and
:func:`read_document` read one into its model (a wrong type, a missing field, an
unexpected kind or a newer schema version is a one-line error naming the file and the
field); an older file is upgraded on read by the models' own migrations.
:data:`DOCUMENT_FILES`, :data:`LINE_FILES` and :data:`NOT_RECORDS` account for every
JSON file abgate writes in an output directory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, overload

from pydantic import ValidationError

from abgate import __version__, safefs
from abgate.errors import AbgateError, UsageError
from abgate.host import host_info
from abgate.integrity import FIELD, verify_file
from abgate.provenance.gitinfo import git_state
from abgate.records.cluster import ClusterBenchDocument
from abgate.records.comparison import ComparisonDoc
from abgate.records.documents import (
    BODIES,
    SCHEMA_VERSIONS,
    AbRecord,
    AnyRecord,
    BaselineRecord,
    BenchRecord,
    Document,
    Kind,
    R,
    RecordHeader,
    RunRecord,
    SpecRecord,
)
from abgate.records.migrations import Stamp, ab_to_v2, to_v2
from abgate.records.result import Result
from abgate.records.sections import GitState, HostInfo
from abgate.records.side_documents import AbBenchDocument, BenchSummary, ProbesDocument, Summary
from abgate.redact import redact
from abgate.runner import records as rec
from abgate.schema import first_error

M = TypeVar("M", bound=Document | Result)  # a document read_document reads


# Every JSON file abgate writes in an output directory (``runner.outdir.OWNED_FILES``):
# the models it is written through (write_record) and read through, or, for the files
# not typed here, what they are and who writes them.
DOCUMENT_FILES: dict[str, tuple[type[Document] | type[Result], ...]] = {
    "run.json": (RunRecord, BenchRecord), "ab.json": (AbRecord,),
    "baseline.json": (BaselineRecord,), "summary.json": (Summary, BenchSummary),
    "probes.json": (ProbesDocument,), "bench.json": (AbBenchDocument,),
    "comparison.json": (ComparisonDoc,),  # typed in records/comparison.py
    "cluster.json": (ClusterBenchDocument,)}  # bench --cluster (records/cluster.py)
LINE_FILES = {  # JSON Lines, appended line by line
    "samples.jsonl": "runner.records.SampleWriter; each line a records.samples.Sample (a "
                     "bench's: a bench.samples.BenchSample or bench.probes.ProbeLine, read "
                     "by bench.samples.read_bench_lines)",
    "agreement.jsonl": "ab.evidence, one compare.agreement_rows.AgreementRow per scored "
                       "sequence (read by ab.analyze.read_agreement)",
    "decisions.jsonl": "ab.decision: one DecisionRecord per line",
    "attachments.jsonl": "provenance.attach: attachment lines",
    "load_samples.jsonl": "bench.load_run: one raw request of a served load bench per line"}
NOT_RECORDS = {  # JSON that is not one of these record documents
    "manifest.json": "provenance.manifest, with its own schema and version",
    "report.json": "a rendered report (report.jsondoc)",
    "signed-files.json": "signing.sign_directory: every file's SHA-256 (signed beside it)",
    "weights-diff-*.json": "weights.diff, schema abgate.weights_diff",
    "load.json": "bench.load_run: a served load bench (spec, schedule, metrics)"}


def source_state(out: Path | None = None) -> GitState | None:
    """The git facts of the working directory's checkout (None outside one), abgate's
    own output directory ``out`` excluded (its records are not source: an A/B's second
    arm must not find the tree dirty because the first arm's files are untracked)."""
    try:
        state = git_state(Path.cwd(), ignore=[out] if out is not None else [])
    except AbgateError:
        return None
    return None if state is None else GitState.model_validate(state)


def new_record(kind: Kind, *, out: Path | None = None, **fields: Any) -> AnyRecord:
    """A new document of ``kind``: the header, then ``fields``. The header's ``git`` is
    ``fields["git"]`` when given (one state for a whole A/B), else the checkout's state
    with ``out`` excluded."""
    git = fields.pop("git") if "git" in fields else source_state(out)
    model = BODIES[kind]
    if issubclass(model, SpecRecord):
        fields = to_v2(fields)  # the engine args as one section, as a v1 record migrates
    elif model is AbRecord:
        fields = ab_to_v2(fields)  # the arms' facets left to the arms' records
    try:
        return model(schema_version=SCHEMA_VERSIONS[kind], kind=kind, status="running",
                     abgate_version=__version__, git=git,
                     host=HostInfo.model_validate(host_info()),
                     started_at=time.time(), ended_at=None, error=None, **fields)
    except ValidationError as exc:  # a writer's bug
        raise _one_line(Path(f"<new {kind} record>"), exc) from None


class _RecordedConfig(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class Prepared(Protocol):
    """What a spec record is made from: a prepared run or bench (``PreparedRun``,
    ``PreparedBench``), its config a model that says how it is recorded."""

    @property
    def config(self) -> _RecordedConfig: ...
    @property
    def spec(self) -> dict[str, Any]: ...
    @property
    def spec_digest(self) -> str: ...


def new_spec_record(kind: Kind, p: Prepared, *, out: Path | None = None,
                    **fields: Any) -> AnyRecord:
    """A new record of the prepared ``p`` (a run, a bench, a baseline): its config as
    recorded, its spec and the spec's digest, then ``fields`` (:func:`new_record`)."""
    return new_record(kind, out=out, config=p.config.to_dict(), spec=p.spec,
                      spec_digest=p.spec_digest, **fields)


def _one_line(path: Path, exc: ValidationError) -> AbgateError:
    first = first_error(exc)
    return AbgateError(f"{path}: {first.dotted or '<root>'}: {first.message}")


def _check_version(path: Path, name: str, doc: dict[str, Any]) -> None:
    version = Stamp.of(doc).schema_version
    known = SCHEMA_VERSIONS[name]
    if isinstance(version, int) and version > known:
        raise AbgateError(f"{path}: {name} schema_version {version} is newer than this "
                          f"abgate understands ({known}); upgrade abgate")


def _validated(path: Path, doc: dict[str, Any],
               model: type[Document | Result] | None = None) -> Document | Result:
    try:
        if model is None:
            header = RecordHeader.model_validate(doc)
            _check_version(path, header.kind, doc)
            return BODIES[header.kind].model_validate(doc)
        if issubclass(model, Document):
            _check_version(path, model.NAME, doc)
        return model.model_validate(doc)
    except ValidationError as exc:
        raise _one_line(path, exc) from None


def check_record(path: Path, doc: dict[str, Any]) -> None:
    """Validate the record ``doc`` against its header and its kind's body model."""
    _validated(path, doc)


def write_record(path: Path, doc: Document | Result) -> None:
    """Write ``doc`` (any record or JSON document, or a compare-layer result document
    such as ``comparison.json``) atomically, after validating what is written against
    its model (a writer's bug is an error, never a bad file)."""
    if isinstance(doc, Result):
        data = doc.to_json()
        try:
            type(doc).model_validate(data)
        except ValidationError as exc:
            raise _one_line(path, exc) from None
    else:
        data = doc.to_dict()
        _validated(path, data, None if isinstance(doc, RecordHeader) else type(doc))
    write_json_atomic(path, data)


def write_json_atomic(path: Path, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` whole or not at all: a failure (a full disk, a read-only directory)
    leaves the previous version and no temporary file, and is a one-line error; a link
    at ``path`` is refused (:func:`abgate.safefs.write_atomic`)."""
    text = json.dumps(redact(doc), indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    safefs.write_atomic(path, text.encode("utf-8"))


def _read(path: Path, model: type[Document | Result] | None,
          redacted: bool) -> Document | Result:
    try:
        doc = rec.read_json_object(path)
        versioned = model is None or issubclass(model, Document)
        if versioned and not isinstance(Stamp.of(doc).schema_version, int):
            raise AbgateError(f"{path}: no schema_version; not an abgate record")
        if not versioned and "schema_version" in doc:  # comparison.json: abgate's own 1
            rec.check_schema(doc, path)
        if redacted and FIELD in doc:  # a sealed document: its bytes before any redaction
            verify_file(path)
        return _validated(path, redact(doc) if redacted else doc, model)
    except AbgateError as exc:  # a damaged or foreign file is bad input, not a failure
        raise UsageError(str(exc)) from None


@overload
def read_record(path: Path, *kinds: Kind, redacted: bool = False) -> AnyRecord: ...
@overload
def read_record(path: Path, *kinds: Kind, model: type[R], redacted: bool = False) -> R: ...


def read_record(path: Path, *kinds: Kind, model: type[R] | None = None,
                redacted: bool = False) -> AnyRecord:
    """A valid record document (header and the kind's body), of one of ``kinds`` when
    given; ``model`` says which model the caller expects (a record of another kind is a
    UsageError); ``redacted``: secrets are redacted on the way in (for reports of
    records written before redaction covered them)."""
    doc = _read(path, None, redacted)
    assert isinstance(doc, RunRecord | AbRecord | BenchRecord | BaselineRecord)
    if kinds and doc.kind not in kinds:
        raise UsageError(f"{path}: a {doc.kind!r} record, where {' or '.join(kinds)} "
                         "was expected")
    if model is not None and not isinstance(doc, model):
        raise UsageError(f"{path}: a {doc.kind!r} record, where a {model.__name__} was "
                         "expected")
    return doc


def read_document(path: Path, model: type[M], *, redacted: bool = False) -> M:
    """A JSON document (``summary.json``, ``probes.json``, ``comparison.json``, ...)
    read into ``model``."""
    doc = _read(path, cast("type[Document | Result]", model), redacted)
    assert isinstance(doc, model)
    return doc
