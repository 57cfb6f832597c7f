"""An existing output directory on the fake engine (moved from the engine tier's
tests/test_run_cli.py): a second run into it is refused with a hint to ``--resume``, a
complete run cannot be resumed with a changed option (its samples untouched), ``--force``
runs it again, and an unwritable parent is refused with exit 2."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.fake import cli, fake_loads


def test_existing_dir_unwritable_and_resume_mismatch(tmp_path: Path) -> None:
    out = tmp_path / "R"
    base = ["run", "--engine", "fake", "--suite", "synthetic", "--limit", "2",
            "--max-tokens", "16"]
    assert cli(*base, "-o", str(out)).returncode == 0
    before = (out / "samples.jsonl").read_bytes()
    with fake_loads() as loaded:
        r = cli(*base, "-o", str(out))
        assert r.returncode == 2 and "--resume" in r.stderr
        r = cli(*base[:-1], "17", "--resume", str(out))  # a complete run cannot be changed
        assert r.returncode == 2 and "already complete" in r.stderr and "max_tokens" in r.stderr
    assert loaded == []  # both refused before anything loads
    assert (out / "samples.jsonl").read_bytes() == before
    assert cli(*base, "-o", str(out), "--force").returncode == 0
    if os.geteuid() != 0:  # root can write anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        r = cli(*base, "-o", str(ro / "R"))
        assert r.returncode == 2 and "cannot write" in r.stderr
