"""The baseline seal covers the bytes on disk (issue 35, item 6): an edit inside a
redacted value, a key written twice and a reformatted file are refused, one line
naming the file and the part, before any engine loads; the recorded file verifies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import abgate.integrity as integrity
from abgate.baseline.core import read_baseline
from abgate.errors import UsageError
from abgate.redact import REDACTED
from tests.support.fake import cli

SECRET = "hunter2-not-a-real-secret"


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    base = tmp_path / "bl"
    r = cli("baseline", "record", "--engine", "fake", "--input-len", "32", "--output-len",
            "8", "--repeats", "1", "--no-probes", "--env", f"MY_API_KEY={SECRET}",
            "-o", str(base))
    assert r.returncode == 0, r.stderr
    text = (base / "baseline.json").read_text()
    assert SECRET not in text and REDACTED in text  # the secret was redacted as written
    return base


def _one_line(r: object, *needles: str) -> str:
    stderr = getattr(r, "stderr", "")
    lines = [x for x in stderr.strip().splitlines() if x.startswith("abgate: error:")]
    assert getattr(r, "returncode", None) == 2 and len(lines) == 1, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_the_recorded_baseline_verifies_and_checks(recorded: Path) -> None:
    integrity.verify_file(recorded / "baseline.json")
    # (in this process, libraries another test loaded since the record are mapped too)
    r = cli("baseline", "check", str(recorded), "--tolerance", "1", "--allow-diff", "library.*")
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_edit_inside_a_redacted_value_is_refused(recorded: Path) -> None:
    """Old code re-redacted the content before hashing, so this edit passed (exit 0)."""
    path = recorded / "baseline.json"
    text = path.read_text()
    path.write_text(text.replace(f'"MY_API_KEY": "{REDACTED}"',
                                 '"MY_API_KEY": "sk-attacker-supplied-value-1234567890"', 1))
    assert path.read_text() != text
    line = _one_line(cli("baseline", "check", str(recorded), "--tolerance", "1"),
                     str(path), "does not match its 'integrity' digest")
    assert "spec" in line or "config" in line
    with pytest.raises(UsageError, match="integrity"):
        read_baseline(path)


def test_a_key_written_twice_is_refused(recorded: Path) -> None:
    """A second copy of a key: Python keeps the last, other readers the first; the
    content parses to the sealed values, so only the bytes show the edit."""
    path = recorded / "baseline.json"
    text = path.read_text()
    edited = text.replace('  "status": "complete",',
                          '  "status": "failed",\n  "status": "complete",', 1)
    assert edited != text
    path.write_text(edited)
    _one_line(cli("baseline", "check", str(recorded), "--tolerance", "1"),
              f"{path}:4:", "bytes are not what abgate wrote")


def test_a_reformatted_file_is_refused_naming_the_line(recorded: Path) -> None:
    path = recorded / "baseline.json"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=1) + "\n")
    with pytest.raises(UsageError, match=r"baseline\.json:2: the file's bytes"):
        integrity.verify_file(path)
    # the ledger and attach read a baseline through the same check
    r = cli("ledger", "add", str(recorded))
    assert r.returncode != 0 and "bytes are not what abgate wrote" in r.stderr, r.stderr


def test_a_redacted_read_verifies_the_seal_first(recorded: Path) -> None:
    """``read_record(..., redacted=True)`` (the reports' way in) redacted the content
    before anything checked it; a sealed file is now verified over its bytes first."""
    from abgate.runner.documents import read_record

    path = recorded / "baseline.json"
    assert read_record(path, "baseline", redacted=True).kind == "baseline"
    path.write_text(path.read_text().replace(
        f'"MY_API_KEY": "{REDACTED}"', '"MY_API_KEY": "sk-attacker-supplied-value-1234567890"',
        1))
    with pytest.raises(UsageError, match="integrity"):
        read_record(path, "baseline", redacted=True)
