"""The tests' record kit writes what the real readers accept: ``tests/support/agreement``'s
``write_probes``/``write_scoring`` and ``tests/support/records``' typed edits go through
the models and ``write_record``, never dict surgery on the JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from abgate.compare.probes import probe_entries
from abgate.errors import UsageError
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.side_documents import ProbesDocument, Summary
from abgate.runner.documents import read_document, read_record
from tests.support.agreement import write_probes, write_scoring
from tests.support.fake import cli, experiment, fake_run
from tests.support.records import edit_document, edit_record


def test_write_probes_is_read_by_the_real_reader(tmp_path: Path) -> None:
    path = write_probes(tmp_path, "b", {"copy": True, "needle": False})
    doc = read_document(path, ProbesDocument)  # refused before: no schema_version
    entries = probe_entries(doc.model_dump(mode="json"))
    assert not isinstance(entries, str)
    assert [(e.name, e.passed) for e in entries] == [("copy", True), ("needle", False)]


def test_write_scoring_and_edit_record_keep_a_valid_ab_json(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    r = cli("ab", str(experiment(tmp_path / "e.toml", limit=4, agreement=False)), "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr
    write_scoring(out, {"b": {"seconds": 1.5, "n_tokens": 10, "method": "full"}})
    doc = read_record(out / "ab.json", "ab", model=AbRecord)
    assert doc.scoring["b"].seconds == 1.5 and doc.scoring["b"].n_tokens == 10
    edited = edit_record(out / "ab.json", status="interrupted")
    assert read_record(out / "ab.json", "ab").status == edited.status == "interrupted"


def test_edit_record_and_edit_document_validate_what_they_write(tmp_path: Path) -> None:
    assert fake_run(tmp_path / "r", limit=2, seeds="0").returncode == 0
    run = tmp_path / "r" / "run.json"
    edit_record(run, status="failed", error="edited by the test")
    doc = read_record(run, "run", model=RunRecord)
    assert (doc.status, doc.error) == ("failed", "edited by the test")
    with pytest.raises(Exception, match="status"):
        edit_record(run, status="not-a-status")
    assert read_record(run, "run").status == "failed"  # nothing half-written
    summary = tmp_path / "r" / "summary.json"
    edit_document(summary, Summary, status="failed")
    assert read_document(summary, Summary).status == "failed"
    with pytest.raises(UsageError):
        read_document(run, ProbesDocument)
