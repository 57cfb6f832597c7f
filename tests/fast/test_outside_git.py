"""abgate run from a directory that is not a git checkout: the records say there is no
source tree (``git: null``) instead of failing to build one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from abgate.runner.documents import read_record
from tests.support.fake import cli, experiment, fake_run


def test_run_and_ab_outside_a_git_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "not-a-checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never find a parent repo
    assert not any((p / ".git").exists() for p in [work, *work.parents])
    r = fake_run(work / "R", limit=2, seeds="0")
    assert r.returncode == 0, r.stderr
    assert json.loads((work / "R" / "run.json").read_text())["git"] is None
    assert read_record(work / "R" / "run.json", "run").git is None
    ab = cli("ab", str(experiment(work / "e.toml", limit=2)), "-o", str(work / "AB"))
    assert ab.returncode == 3, ab.stderr  # 2 items: INCONCLUSIVE, but the A/B ran
    assert json.loads((work / "AB" / "ab.json").read_text())["git"] is None
    assert os.getcwd() == str(work)
