"""Baseline refusals on the fake engine (were engine-tier tests on llama.cpp in
tests/test_baseline.py): a missing baseline, a hand-edited one refused before anything
loads, and a record whose own warm-up contradicts its repeats (a handler's reply)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.engines.base import GenerationResult
from abgate.engines.fake import FakeCall
from tests.support.fake import cli, fake_loads, use_handler

RECORD = ("baseline", "record", "--engine", "fake", "--input-len", "16,32", "--output-len",
          "4", "--no-probes")


def test_check_without_baseline_is_a_usage_error(tmp_path: Path) -> None:
    with fake_loads() as loaded:
        r = cli("baseline", "check", str(tmp_path))
    assert r.returncode == 2 and "no baseline.json" in r.stderr and loaded == []


def test_hand_edited_baseline_is_refused_before_loading(tmp_path: Path) -> None:
    """An injected engine arg and one changed reference token: exit 2 naming both parts,
    before any engine loads."""
    out = tmp_path / "B"
    r = cli(*RECORD, "--repeats", "1", "--warmup", "0", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "baseline.json").read_text())
    doc["engine"]["given"]["n_ctx"] = 10 ** 9  # a hand edit, written raw
    doc["cases"][1]["output_token_ids"][2] += 1
    edited = tmp_path / "E"
    edited.mkdir()
    (edited / "baseline.json").write_text(json.dumps(doc))
    with fake_loads() as loaded:
        r = cli("baseline", "check", str(edited), "--tolerance", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "does not match its 'integrity' digest" in line
    assert "engine.given" in line and "cases[1]" in line and "cases[0]" not in line
    del doc["integrity"]  # an incomplete one (no seal) is refused too
    (edited / "baseline.json").write_text(json.dumps(doc))
    with fake_loads() as again:
        r = cli("baseline", "check", str(edited), "--tolerance", "1")
    assert r.returncode == 2 and "no 'integrity' digest" in r.stderr
    assert loaded == [] and again == []


def test_record_refuses_a_reference_its_own_warmup_contradicts(tmp_path: Path) -> None:
    """A build whose greedy warm-up differs from its repeats is no reference: the
    baseline is written ``failed`` naming the divergence, and refused."""
    from abgate.baseline import core
    from abgate.errors import UsageError

    def warmup_differs(call: FakeCall) -> GenerationResult:
        second = 9 if call.number == 1 else 7  # the first request is the warm-up
        return call.reply(token_ids=[5, second, 6, 8], finish="length")

    out = tmp_path / "B"
    with use_handler(warmup_differs):
        r = cli("baseline", "record", "--engine", "fake", "--input-len", "16",
                "--output-len", "4", "--no-probes", "--warmup", "1", "--repeats", "2",
                "-o", str(out))
    assert r.returncode != 0, r.stdout + r.stderr
    assert ("2/2 repeats match, the warm-up differs; "
            "warm-up 1 leaves the first repeat at token 1") in r.stderr, r.stderr
    doc = json.loads((out / "baseline.json").read_text())
    assert doc["status"] == "failed" and "warm-up 1" in doc["error"]
    with pytest.raises(UsageError, match="status 'failed'"):
        core.read_baseline(out / "baseline.json")
