"""``abgate baseline upgrade DIR`` (issue 35, item 6): an old seal is verified under its
own rules before the baseline is re-sealed; one that does not verify, and a baseline
never sealed (unless --accept-unsealed), are refused with nothing written; the
committed H200 baselines read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import abgate.integrity as integrity
from abgate.baseline.core import read_baseline
from tests.support.fake import cli

FIELD = "integrity"
ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "benchmarks" / "results" / "gpu").rglob("baseline.json"))


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    base = tmp_path / "bl"
    r = cli("baseline", "record", "--engine", "fake", "--input-len", "32", "--output-len",
            "8", "--repeats", "1", "--no-probes", "-o", str(base))
    assert r.returncode == 0, r.stderr
    return base


def _rewrite(base: Path, edit: object) -> bytes:
    doc = json.loads((base / "baseline.json").read_text())
    assert callable(edit)
    edit(doc)
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    (base / "baseline.json").write_bytes(data)
    return data


def test_an_unsealed_baseline_is_refused_unless_accepted(recorded: Path) -> None:
    before = _rewrite(recorded, lambda d: d.pop(FIELD))
    r = cli("baseline", "upgrade", str(recorded))
    assert r.returncode == 2 and "was never sealed" in r.stderr and "--accept-unsealed" \
        in r.stderr, r.stderr
    assert (recorded / "baseline.json").read_bytes() == before  # nothing written
    r = cli("baseline", "upgrade", str(recorded), "--accept-unsealed")
    assert r.returncode == 0 and "upgraded" in r.stdout, r.stderr
    doc = integrity.verify_file(recorded / "baseline.json")
    assert doc[FIELD]["version"] == integrity.VERSION
    assert doc["upgrades"][0]["verified"] == "unsealed"
    assert doc["upgrades"][0]["previous_sha256"] == hashlib.sha256(before).hexdigest()
    read_baseline(recorded / "baseline.json")


def test_an_old_seal_is_verified_under_its_own_rules(recorded: Path) -> None:
    _rewrite(recorded, lambda d: d[FIELD].pop("version"))  # a seal written before v2
    r = cli("baseline", "upgrade", str(recorded))
    assert r.returncode == 0 and "old seal verified" in r.stdout, r.stdout + r.stderr
    doc = integrity.verify_file(recorded / "baseline.json")
    assert doc["upgrades"][0]["verified"] == "old seal"
    assert doc["upgrades"][0]["previous_seal_version"] == 1
    again = cli("baseline", "upgrade", str(recorded))  # nothing left to do
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_an_old_seal_that_does_not_verify_is_refused(recorded: Path) -> None:
    def edit(d: dict[str, object]) -> None:
        section = d[FIELD]
        assert isinstance(section, dict)
        section.pop("version")
        d["recorded_at"] = 1.0
    before = _rewrite(recorded, edit)
    r = cli("baseline", "upgrade", str(recorded), "--accept-unsealed")
    assert r.returncode == 2 and "recorded_at" in r.stderr and "digest" in r.stderr, r.stderr
    assert (recorded / "baseline.json").read_bytes() == before


def test_upgrade_of_a_directory_without_a_baseline_is_a_usage_error(tmp_path: Path) -> None:
    r = cli("baseline", "upgrade", str(tmp_path))
    assert r.returncode == 2 and "no baseline.json" in r.stderr


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_the_committed_h200_baselines_read(path: Path) -> None:
    """Today's reader reads every committed H200 baseline, its seal verified over the bytes
    (the three recorded before seals were upgraded in place with --accept-unsealed, then
    re-recorded on the H200 on 2026-12-02: sealed when written, no upgrade needed)."""
    assert len(COMMITTED) >= 3
    doc, _ = read_baseline(path)
    assert doc.upgrades or path.read_text().count('"integrity"') == 1


def test_upgrade_does_not_launder_an_edit_inside_a_redacted_value(tmp_path: Path) -> None:
    """An old seal that matches only with the content redacted again (the old reader's
    blind spot) is refused, nothing written."""
    base = tmp_path / "bl"
    r = cli("baseline", "record", "--engine", "fake", "--input-len", "32", "--output-len",
            "8", "--repeats", "1", "--no-probes", "--env", "MY_API_KEY=hunter2-secret-value",
            "-o", str(base))
    assert r.returncode == 0, r.stderr
    path = base / "baseline.json"
    doc = json.loads(path.read_text())
    doc[FIELD].pop("version")  # an old seal
    doc["spec"]["env"]["MY_API_KEY"] = "sk-attacker-supplied-value-1234567890"
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    path.write_bytes(data)
    r = cli("baseline", "upgrade", str(base), "--accept-unsealed")
    assert r.returncode == 2 and "redacted value was edited" in r.stderr, r.stderr
    assert "spec.env" in r.stderr and path.read_bytes() == data
