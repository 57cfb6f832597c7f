"""Golden records (tests/data/golden/v<N>/, written by ``python -m tests.support.golden``
with the real writers) read back through the real readers: the record validators, the
analysis, the report and the ledger; and what today's writers produce still has every
field a golden record has (a field dropped or renamed needs a new schema version and a
migration, not a silent change)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from abgate.ab.analyze import analyze
from abgate.records.documents import BODIES
from abgate.records.side_documents import BenchSummary, ProbesDocument
from abgate.report import render
from abgate.runner.documents import read_document, read_record
from abgate.runner.records import check_schema, read_json
from abgate.runner.samples import load_samples
from abgate.runner.summary import Summary
from tests.support.fake import cli
from tests.support.golden import GOLDEN, version_tag, write_all

SETS = sorted(p for p in GOLDEN.iterdir() if p.is_dir())
RECORDS = {  # file -> the kind read_record expects
    "run/run.json": "run", "ab/ab.json": "ab", "ab/arms/a/run.json": "ab-arm",
    "ab/arms/b/run.json": "ab-arm", "bench/run.json": "bench",
    "baseline/baseline.json": "baseline"}
JSON_FILES = ["run/summary.json", "ab/comparison.json", "ab/arms/b/summary.json",
              "bench/summary.json"]


def test_the_current_versions_have_a_golden_set() -> None:
    assert (GOLDEN / version_tag()).is_dir(), "run: python -m tests.support.golden"


@pytest.mark.parametrize("golden", SETS, ids=[p.name for p in SETS])
def test_golden_records_read_back(golden: Path) -> None:
    for name, kind in RECORDS.items():
        doc = read_record(golden / name, kind)
        assert doc.kind == kind and doc.status == "complete", name
    for name in JSON_FILES:
        check_schema(read_json(golden / name), golden / name)


@pytest.mark.parametrize("golden", SETS, ids=[p.name for p in SETS])
def test_golden_ab_is_analysed_and_reported_as_recorded(golden: Path, tmp_path: Path) -> None:
    ab = tmp_path / "ab"
    shutil.copytree(golden / "ab", ab)
    recorded = json.loads((golden / "ab" / "comparison.json").read_text())
    again = analyze(ab)
    assert again.decision == recorded["decision"]
    verdict = again.comparisons["b"].verdict.to_json()
    # every verdict now records the MDE it had (issue 34); a golden verdict written
    # before that has none, and everything else must be as recorded
    assert verdict.pop("mde")["gates"]["accuracy"]["detectable"] is not None
    was = dict(recorded["comparisons"]["b"]["verdict"])
    was.pop("mde", None)  # a golden set written since records it (tests/data/golden/v1-2)
    assert verdict == was
    assert recorded["decision"] in render(ab, "md")


@pytest.mark.parametrize("golden", SETS, ids=[p.name for p in SETS])
def test_golden_dirs_are_indexed_by_the_ledger(golden: Path, tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.sqlite")
    r = cli("ledger", "add", "--ledger", ledger, *(str(golden / k) for k in
                                                    ("run", "ab", "bench", "baseline")))
    assert r.returncode == 0, r.stderr + r.stdout
    assert cli("ledger", "ls", "--ledger", ledger).stdout.count("complete") == 4


def _paths(doc: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document (lists: their first element's)."""
    if isinstance(doc, dict):
        return {p for k, v in doc.items() for p in {f"{prefix}.{k}"} | _paths(v, f"{prefix}.{k}")}
    if isinstance(doc, list) and doc and isinstance(doc[0], dict | list):
        return _paths(doc[0], prefix + "[]")
    return set()


STABLE = ["run/run.json", "run/summary.json", "ab/ab.json", "ab/comparison.json",
          "bench/run.json", "baseline/baseline.json"]
VARIABLE = (".provenance", ".host", ".git", ".env", ".engine.effective_config")


def test_todays_writers_keep_every_golden_field(tmp_path: Path, small_bandwidth_probe: None
                                                ) -> None:
    write_all(tmp_path / "now")
    golden = GOLDEN / version_tag()
    for name in STABLE:
        old = _paths(json.loads((golden / name).read_text()))
        new = _paths(json.loads((tmp_path / "now" / name).read_text()))
        lost = sorted(p for p in old - new if not p.startswith(VARIABLE))
        assert not lost, f"{name}: fields gone without a new schema version: {lost[:8]}"


TYPED_DOCUMENTS = {  # file -> the model read_document reads it into
    "run/summary.json": Summary, "ab/arms/a/summary.json": Summary,
    "ab/arms/b/summary.json": Summary, "bench/summary.json": BenchSummary,
    "ab/arms/a/probes.json": ProbesDocument, "ab/arms/b/probes.json": ProbesDocument}
SAMPLE_FILES = ["run/samples.jsonl", "ab/arms/a/samples.jsonl", "ab/arms/b/samples.jsonl"]


@pytest.mark.parametrize("golden", SETS, ids=[p.name for p in SETS])
def test_every_golden_file_reads_through_its_typed_model(golden: Path) -> None:
    """Records, summaries, probes and sample lines of every golden set read into their
    models; written again, a current-version file is the JSON it was (the same keys and
    values: the models keep what they do not name and add nothing)."""
    current = golden.name == version_tag()
    for name, kind in RECORDS.items():
        doc = read_record(golden / name, kind)
        assert isinstance(doc, BODIES[kind]), name
        if current:
            assert doc.to_dict() == json.loads((golden / name).read_text()), name
    for name, model in TYPED_DOCUMENTS.items():
        typed = read_document(golden / name, model)
        if current:
            assert typed.to_dict() == json.loads((golden / name).read_text()), name
    for name in SAMPLE_FILES:
        lines = [json.loads(x) for x in (golden / name).read_text().splitlines()]
        samples = load_samples(golden / name)
        assert len(samples) == len(lines) and all(s.key for s in samples), name
        if current:
            assert [s.to_dict() for s in samples] == lines, name
