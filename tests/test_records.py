from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from abgate.errors import AbgateError, UsageError
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.samples import Sample
from abgate.records.side_documents import AbBenchDocument, ProbesDocument
from abgate.runner import records as rec
from abgate.runner.documents import (
    new_record,
    read_document,
    read_record,
    write_json_atomic,
    write_record,
)
from abgate.runner.execute import _PENDING, _interrupts, check_interrupted
from abgate.runner.outdir import prepare_new_dir
from abgate.signals import Interrupted


def test_torn_last_line_is_dropped_and_repaired(tmp_path: Path) -> None:
    p = tmp_path / "samples.jsonl"
    p.write_text('{"key": "a"}\n{"key": "b"}\n{"key": "c", "out')
    assert [s["key"] for s in rec.read_samples(p)] == ["a", "b"]
    assert p.read_text().endswith('"c", "out')  # not repaired unless asked
    assert [s["key"] for s in rec.read_samples(p, repair=True)] == ["a", "b"]
    assert p.read_text() == '{"key": "a"}\n{"key": "b"}\n'


def test_complete_json_without_newline_counts_as_torn(tmp_path: Path) -> None:
    p = tmp_path / "samples.jsonl"
    p.write_text('{"key": "a"}\n{"key": "b"}')
    assert [s["key"] for s in rec.read_samples(p, repair=True)] == ["a"]
    with rec.SampleWriter(p) as w:
        w.append(Sample(key="b"))
    assert [s["key"] for s in rec.read_samples(p)] == ["a", "b"]


def test_corrupt_middle_line_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "samples.jsonl"
    p.write_text('{"key": "a"}\ngarbage\n{"key": "c"}\n')
    with pytest.raises(AbgateError, match=r"samples.jsonl:2: corrupt"):
        rec.read_samples(p)


def test_future_schema_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps({"schema_version": rec.SCHEMA_VERSION + 1}))
    with pytest.raises(AbgateError, match="newer than this abgate understands"):
        rec.read_json(p)
    p.write_text(json.dumps({"hello": 1}))
    with pytest.raises(AbgateError, match="no schema_version"):
        rec.read_json(p)


def test_atomic_write_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    write_json_atomic(p, {"schema_version": 1, "x": 1})
    write_json_atomic(p, {"schema_version": 1, "x": 2})
    assert rec.read_json(p)["x"] == 2
    assert [f.name for f in tmp_path.iterdir()] == ["run.json"]


def test_non_empty_dir_needs_force(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty; use --resume"):
        prepare_new_dir(tmp_path, force=False)
    with pytest.raises(UsageError, match="holds no run.json"):
        prepare_new_dir(tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_diff_paths() -> None:
    a = {"x": 1, "y": {"z": 2, "w": 3}}
    b = {"x": 1, "y": {"z": 5, "w": 3}, "v": 0}
    assert list(rec.iter_diff(a, b)) == ["v", "y.z"]


def test_record_documents_are_typed_per_kind(tmp_path: Path) -> None:
    """Every kind has a typed body, checked on write (a writer's bug never reaches the
    disk) and on read (one line naming the file and the field)."""
    run = new_record("run", config={"suite": "synthetic"}, spec={"engine": "llamacpp"},
                     spec_digest="d" * 64, resumes=[])
    path = tmp_path / "run.json"
    write_record(path, run)
    back = read_record(path, "run", model=RunRecord)
    assert back.spec_digest == "d" * 64 and back.spec.engine == "llamacpp"
    with pytest.raises(AbgateError, match=r"run.json: a 'run' record, where ab was expected"):
        read_record(path, "ab")
    with pytest.raises(AbgateError, match=r"run.json: a 'run' record, where a AbRecord was"):
        read_record(path, model=AbRecord)
    # a writer's bug that slipped past the model (an unvalidated copy) is refused on write
    bad = run.model_copy(update={"spec_digest": 7})
    with pytest.warns(UserWarning), pytest.raises(
            AbgateError, match=r"run.json: spec_digest: Input should be a valid string"):
        write_record(path, bad)
    assert read_record(path).spec_digest == "d" * 64  # the refused write left it as it was
    path.write_text(json.dumps({**run.to_dict(), "engine": {"name": "llamacpp", "given": 1}}))
    with pytest.raises(AbgateError, match=r"run.json: engine.given: Input should be a valid dict"):
        read_record(path)
    # a new record is built as its model: a bad field is refused before anything is written
    with pytest.raises(AbgateError, match=r"schedule.mode: Input should be "
                                          r"'interleave' or 'blocks'"):
        new_record("ab", experiment={"baseline": "a", "arms": {"a": {}}},
                   arm_spec_digests={"a": "x"}, digest="y",
                   schedule={"mode": "sideways", "warmup": 0, "block_size": 8,
                             "executed": []}, engines={}, resumes=[])
    assert not (tmp_path / "ab.json").exists()


def test_a_signal_interrupts_between_samples_and_a_second_at_once() -> None:
    """The first Ctrl-C/SIGTERM only notes itself (raising from a handler that Python
    may run inside a ctypes callback would be dropped); the run loop's
    check_interrupted raises it; a second signal raises at once. A SIGINT ignored on
    entry (nohup, a background job) stays ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with _interrupts():
            signal.raise_signal(signal.SIGINT)  # the handler has run when this returns
            time.sleep(0.01)
            assert _PENDING == [signal.SIGINT]  # noted, nothing raised
            with pytest.raises(Interrupted):
                check_interrupted()
            with pytest.raises(Interrupted):
                signal.raise_signal(signal.SIGTERM)
                time.sleep(0.01)
        assert _PENDING == [] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        check_interrupted()  # outside a tracked run: nothing pending
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with _interrupts():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_older_schema_version_is_upgraded_on_read(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """When a document's schema moves on, its older files read through the registered
    steps (a version-aware before-validator), and a newer file than the reader knows is
    refused in one line. Here ``summary`` goes to a (pretend) version 2 that renamed
    version 1's ``count`` to ``n``."""
    from abgate.records import documents
    from abgate.runner.summary import Summary, summarize

    now = summarize([]).to_dict()
    old = {k: v for k, v in now.items() if k != "n"} | {"count": 0, "schema_version": 1}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(old))
    monkeypatch.setitem(documents.SCHEMA_VERSIONS, "summary", 2)
    with pytest.raises(AbgateError, match=r"summary.json: n: Field required"):
        read_document(path, Summary)  # no step registered: version 1 is not version 2
    monkeypatch.setitem(documents.MIGRATIONS, "summary", {
        1: lambda d: {**{k: v for k, v in d.items() if k != "count"}, "n": d["count"]}})
    upgraded = read_document(path, Summary)
    assert upgraded.n == 0 and upgraded.schema_version == 2
    assert "count" not in upgraded.to_dict()
    path.write_text(json.dumps({**now, "schema_version": 3}))
    with pytest.raises(AbgateError, match=r"summary schema_version 3 is newer than this "
                                          r"abgate understands \(2\)"):
        read_document(path, Summary)


def test_every_json_document_is_written_through_its_model(tmp_path: Path) -> None:
    """summary.json, probes.json and an arm's bench.json go through the same checked
    write as the records: a document its model refuses never reaches the disk."""
    bad = ProbesDocument.new(probes=[]).model_copy(update={"probes": "none"})
    with pytest.warns(UserWarning), pytest.raises(
            AbgateError, match=r"probes.json: probes: Input should be a valid list"):
        write_record(tmp_path / "probes.json", bad)
    assert not (tmp_path / "probes.json").exists()
    write_record(tmp_path / "bench.json", AbBenchDocument.new(plan={"input_len": [8]},
                                                              cases=[]))
    assert read_document(tmp_path / "bench.json", AbBenchDocument).plan == {"input_len": [8]}
    assert json.loads((tmp_path / "bench.json").read_text())["kind"] == "ab-bench"


def test_every_json_file_abgate_writes_is_accounted_for() -> None:
    """Each JSON or JSON Lines name abgate owns in an output directory has its model
    (written through write_record), or is named as a line file or as not a record."""
    from abgate.runner.documents import DOCUMENT_FILES, LINE_FILES, NOT_RECORDS
    from abgate.runner.outdir import OWNED_FILES, OWNED_PATTERNS

    names = {n for n in (*OWNED_FILES, *OWNED_PATTERNS) if n.endswith((".json", ".jsonl"))}
    known = {*DOCUMENT_FILES, *LINE_FILES, *NOT_RECORDS}
    assert names == known, (sorted(names - known), sorted(known - names))


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_write_record_writes_and_checks_a_comparison_doc(tmp_path: Path) -> None:
    """comparison.json goes through write_record too: its to_json as written, and a
    result that does not validate (a writer's bug) is a one-line error, no file."""
    from abgate.records.comparison import ComparisonDoc

    doc = ComparisonDoc(schema_version=1, kind="ab-comparison", baseline="a",
                        decision="ACCEPT", exit_code=0)
    write_record(tmp_path / "comparison.json", doc)
    written = json.loads((tmp_path / "comparison.json").read_text())
    assert written == doc.to_json()
    assert read_document(tmp_path / "comparison.json", ComparisonDoc) == doc
    bad = ComparisonDoc.model_construct(exit_code="zero", _fields_set={"exit_code"})
    with pytest.raises(AbgateError, match=r"bad\.json: exit_code: "):
        write_record(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()
