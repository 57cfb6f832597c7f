from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from abgate.errors import AbgateError, UsageError
from abgate.runner import records as rec
from abgate.runner.documents import new_record, read_record, write_record
from abgate.runner.execute import _PENDING, Interrupted, _interrupts, check_interrupted
from abgate.runner.outdir import prepare_new_dir


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
        w.append({"key": "b"})
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
    rec.write_json_atomic(p, {"schema_version": 1, "x": 1})
    rec.write_json_atomic(p, {"schema_version": 1, "x": 2})
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
    assert read_record(path, "run")["spec_digest"] == "d" * 64
    with pytest.raises(AbgateError, match=r"run.json: a 'run' record, where ab was expected"):
        read_record(path, "ab")
    bad = {**run, "spec_digest": 7}
    with pytest.raises(AbgateError, match=r"run.json: spec_digest: Input should be a valid "
                                          r"string"):
        write_record(path, bad)
    assert read_record(path)["spec_digest"] == "d" * 64  # the refused write left it as it was
    path.write_text(json.dumps({**run, "engine": {"name": "llamacpp"}}))
    with pytest.raises(AbgateError, match=r"run.json: engine.effective_config: Field required"):
        read_record(path)
    ab = new_record("ab", experiment={}, arm_spec_digests={"a": "x"}, digest="y",
                    schedule={"mode": "sideways", "warmup": 0, "block_size": 8,
                              "executed": []}, engines={}, resumes=[])
    with pytest.raises(AbgateError, match=r"ab.json: schedule.mode: Input should be "
                                          r"'interleave' or 'blocks'"):
        write_record(tmp_path / "ab.json", ab)
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
