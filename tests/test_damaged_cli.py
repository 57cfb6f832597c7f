"""One line, never a traceback, and no temporary file left (issue 26, item 7): a
damaged ledger (a corrupt page, a cell that is not JSON) under ``ledger ls``,
``ledger check``, ``history`` and ``ledger add``; ``report -o`` onto a directory; a
baseline whose probes list was edited, refused before the re-run. The fast ones run the
CLI in this process (``tests.support.fake.cli``, as the console script runs it)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from abgate.ledger.store import opened
from tests.support.fake import Result, cli, fake_loads
from tests.support.report import build_ab_dir
from tests.test_ledger import _entry


@pytest.fixture(scope="module")
def pristine_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger of a few pages, written once (40 committed puts); each test damages its
    own copy (:func:`_ledger`), never this file."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"
    with opened(path) as db:
        for i in range(40):  # a few pages
            db.put(_entry(i, 100.0 + i, 1.0, f"c{i:02d}" * 10))
    return path


def _ledger(pristine: Path, tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    shutil.copyfile(pristine, path)
    return path


def _one_line(r: subprocess.CompletedProcess[str] | Result, *needles: str) -> None:
    stderr = r.stderr
    assert r.returncode in (1, 2), stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    for needle in needles:
        assert needle in stderr, stderr


COMMANDS = [["ledger", "ls"], ["ledger", "check"], ["history", "steady_decode_tps"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_ledger_cell_that_is_not_json(tmp_path: Path, command: list[str],
                                      pristine_ledger: Path) -> None:
    path = _ledger(pristine_ledger, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE units SET metrics = '{not json'")
        db.execute("UPDATE records SET verdicts = '{not json'")
    _one_line(cli(*command, "--ledger", str(path)), str(path), "not valid JSON")


@pytest.mark.parametrize("command", [*COMMANDS, ["ledger", "add"]])
def test_ledger_with_a_damaged_page(tmp_path: Path, command: list[str],
                                    pristine_ledger: Path) -> None:
    path = _ledger(pristine_ledger, tmp_path)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    data[page:3 * page] = b"\xa5" * (2 * page)  # garbage over pages 2 and 3
    path.write_bytes(bytes(data))
    sample = tmp_path / "samples_gsm8k_2024-01-01T00-00-00.000000.jsonl"  # a good file to add
    sample.write_text('{"doc_id": 0, "resps": [["The answer is 3."]]}\n')
    extra = [str(sample)] if command == ["ledger", "add"] else []
    _one_line(cli(*command, *extra, "--ledger", str(path)), str(path))


def test_report_onto_a_directory_leaves_no_tmp(tmp_path: Path) -> None:
    ab = build_ab_dir(tmp_path / "ab")
    target = tmp_path / "out"
    target.mkdir()
    r = cli("report", str(ab), "-o", str(target))
    _one_line(r, "is a directory")
    assert r.returncode == 2
    assert not (tmp_path / "out.tmp").exists() and list(target.iterdir()) == []


def test_baseline_with_edited_probes_is_refused_before_the_rerun(tmp_path: Path) -> None:
    """On the fake engine (was an engine-tier test on llama.cpp): the check refuses the
    edited record before it loads an engine."""
    out = tmp_path / "B"
    r = cli("baseline", "record", "--engine", "fake", "--input-len", "16", "--output-len",
            "4", "--repeats", "1", "--warmup", "0", "--no-probes", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "baseline.json").read_text())
    doc["probes"] = [{"name": "arithmetic", "passed": True}]  # a hand edit, written raw
    (out / "baseline.json").write_text(json.dumps(doc))
    with fake_loads() as loaded:
        r = cli("baseline", "check", str(out))
    _one_line(r, "baseline.json", "probes")
    assert r.returncode == 2 and loaded == []
