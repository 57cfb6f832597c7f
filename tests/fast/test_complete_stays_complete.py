"""A complete run reopened by the library and then ended otherwise (interrupted) stays
complete in run.json *and* summary.json: the two records never disagree on it."""

from __future__ import annotations

import json
from pathlib import Path

from abgate.runner.execute import RunRecorder
from abgate.runner.spec import RunConfig, prepare
from tests.support.fake import fake_run


def test_a_reopened_complete_run_stays_complete_in_both_records(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert fake_run(out, limit=2).returncode == 0
    doc = json.loads((out / "run.json").read_text())
    recorder = RunRecorder(prepare(RunConfig.from_dict(doc["config"], "config")), out,
                           resume=True, force=False, git=doc.get("git"))
    summary = recorder.finish("interrupted", "interrupted by the user")
    assert summary.status == "complete"
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
