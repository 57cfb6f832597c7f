"""``--resume`` says what it is given: a directory that is not a run or an A/B is refused
before anything loads, and a reopened complete record is never downgraded. A complete
run or A/B being "already complete" (nothing rerun, nothing loaded, ``--reanalyse`` /
``--force``) is tests/fast/test_resume_complete_fake.py."""

from __future__ import annotations

from pathlib import Path

from abgate.runner.execute import kept_status
from tests.conftest import engine_refused
from tests.support.fake import cli


def one_line_error(r: object, *texts: str) -> None:
    err = getattr(r, "stderr", "")
    assert getattr(r, "returncode", None) == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for text in texts:
        assert text in err, (text, err)


def test_not_a_run_is_refused_before_anything_loads(tmp_path: Path) -> None:
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine\n")
    with engine_refused() as imported:  # the commands run in this process
        # the hub data would take a download to fail; the directory is refused first
        r = cli("run", "--resume", str(stray), "--data", "hf:openai/gsm8k")
        one_line_error(r, f"--resume {stray}: not a run directory (no run.json)",
                       "nothing to resume")
        one_line_error(cli("run", "--resume", str(tmp_path / "nope")), "no such directory")
        one_line_error(cli("run", "--resume", str(stray / "notes.txt")), "not a directory")
        one_line_error(cli("ab", "--resume", str(stray)),
                       f"--resume {stray}: not an A/B directory (no ab.json)")
        (stray / "ab.json").write_text("{}")  # an A/B's directory given to `run`: name `ab`
        one_line_error(cli("run", "--resume", str(stray)), f"abgate ab --resume {stray}")
        one_line_error(cli("ab", "--reanalyse", "-o", str(stray)),
                       "--reanalyse needs --resume")
    assert not imported
    assert sorted(p.name for p in stray.iterdir()) == ["ab.json", "notes.txt"]


def test_kept_status_never_downgrades_complete() -> None:
    assert kept_status("complete", "interrupted") == "complete"
    assert kept_status("complete", "failed") == "complete"
    assert kept_status("interrupted", "interrupted") == "interrupted"
    assert kept_status(None, "failed") == "failed"
