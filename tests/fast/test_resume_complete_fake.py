"""A resume of a complete run or A/B on the fake engine (moved from the engine tier's
tests/test_resume_cli.py): nothing is left to finish, so no engine loads and the records
stay byte-identical; a changed option is refused; the library reopening and interrupting a
complete run keeps it complete; ``--force`` runs it again; ``--reanalyse`` recomputes an
A/B's comparison without loading an engine."""

from __future__ import annotations

import json
from pathlib import Path

from abgate.runner import RunConfig, prepare
from abgate.runner.execute import RunRecorder
from tests.conftest import read_lines
from tests.support.fake import cli, fake_loads

AA = """
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "trivial"
limit = 2
max_tokens = 16
[schedule]
warmup = 0
[evidence]
probes = false
[arms.a1]
[arms.a2]
"""


def _one_line_error(r: object, *texts: str) -> None:
    err = getattr(r, "stderr", "")
    assert getattr(r, "returncode", None) == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for text in texts:
        assert text in err, (text, err)


def test_complete_run_is_already_complete(tmp_path: Path) -> None:
    out = tmp_path / "R"
    base = ["run", "--engine", "fake", "--suite", "synthetic", "--limit", "2",
            "--max-tokens", "16"]
    assert cli(*base, "-o", str(out)).returncode == 0

    def records() -> dict[str, bytes]:  # the lock file names its last holder
        return {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".abgate.lock"}

    before = records()
    with fake_loads() as loaded:
        r = cli("run", "--resume", str(out))
        assert r.returncode == 0, r.stderr
        assert f"run {out} is already complete (2 samples); nothing to resume" in r.stderr
        assert "complete" in r.stdout and "2" in r.stdout  # its summary table
        _one_line_error(cli("run", "--resume", str(out), "--max-tokens", "17"),
                        "already complete", "the options given change its max_tokens")
        assert cli("run", "--resume", str(out), "--max-tokens", "16").returncode == 0
    assert loaded == []
    assert records() == before

    # reopened by the library and then interrupted: the record stays complete
    doc = json.loads((out / "run.json").read_text())
    recorder = RunRecorder(prepare(RunConfig.from_dict(doc["config"], "config")), out,
                           resume=True, force=False, git=doc.get("git"))
    recorder.finish("interrupted", "interrupted by the user")
    after = json.loads((out / "run.json").read_text())
    assert after["status"] == "complete" and after["error"] is None
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
    assert len(read_lines(out / "samples.jsonl")) == 2

    # --force with --resume runs the recorded configuration again, and says so
    with fake_loads() as loaded:
        r = cli("run", "--resume", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert "--force: running the complete run" in r.stderr and len(loaded) == 1
    assert json.loads((out / "run.json").read_text())["resumes"] == []


def test_complete_ab_is_already_complete_and_reanalyses(tmp_path: Path) -> None:
    exp = tmp_path / "aa.toml"
    exp.write_text(AA)
    out = tmp_path / "AB"
    first = cli("ab", str(exp), "-o", str(out))
    assert first.returncode == 3, first.stderr  # 2 items decide nothing
    ab_before = (out / "ab.json").read_bytes()
    comparison = out / "comparison.json"
    with fake_loads() as loaded:
        r = cli("ab", "--resume", str(out))
        assert r.returncode == 3, r.stderr  # the recorded verdict's exit code
        assert f"A/B {out} is already complete; nothing to resume" in r.stderr
        assert "a2 vs a1: INCONCLUSIVE" in r.stdout and "report.html" in r.stdout
        assert (out / "ab.json").read_bytes() == ab_before

        comparison.write_text(comparison.read_text().replace('"ab_status"', '"ab_status_old"'))
        r = cli("ab", "--resume", str(out), "--reanalyse")
        assert r.returncode == 3, r.stderr
        assert "--reanalyse: recomputing" in r.stderr and "no engine is loaded" in r.stderr
    assert json.loads(comparison.read_text())["ab_status"] == "complete"  # rewritten
    assert (out / "ab.json").read_bytes() == ab_before
    assert loaded == []
