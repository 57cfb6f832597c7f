"""A disk that fills up during ``abgate run``: a clear one-line error, the samples
already written kept, and ``--resume`` (once there is space again) finishes the run
with every (item, seed) exactly once.

The full disk is simulated in the CLI process (a ``sitecustomize`` on PYTHONPATH for a
subprocess, the same code run around ``tests.support.fake.cli`` in this one): from
the (N+1)-th sample on, every ``fsync`` fails with ENOSPC (the sample's own, and those
of every record written atomically: run.json, summary.json); N = -1 fails the first
write of run.json. The tests run as root here, so a read-only directory cannot be
simulated with permissions; it fails the same writes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from abgate.runner import records
from tests.conftest import abgate, error_lines, read_lines
from tests.support.fake import Result, cli
from tests.support.fault_server import FaultServer

INJECT = '''
import errno, os
from abgate.runner import records

_after = int(os.environ["ABGATE_TEST_DISK_FULL_AFTER"])
_errno = getattr(errno, os.environ.get("ABGATE_TEST_DISK_ERRNO", "ENOSPC"))
_tried = [0]
_append, _fsync = records.SampleWriter.append, os.fsync


def append(self, record):
    _tried[0] += 1
    _append(self, record)


def fsync(fd):  # from the (after + 1)-th sample on, the disk is full
    if _tried[0] > _after:
        raise OSError(_errno, os.strerror(_errno))
    _fsync(fd)


records.SampleWriter.append = append
os.fsync = fsync
'''


def _full_in_a_subprocess(args: list[str], tmp_path: Path, after: int,
                          err: str) -> subprocess.CompletedProcess[str]:
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(INJECT)
    # the injection first, then this checkout's source (as every other call runs)
    path = os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p)
    return abgate(*args, env={"PYTHONPATH": path, "ABGATE_TEST_DISK_FULL_AFTER": str(after),
                              "ABGATE_TEST_DISK_ERRNO": err}, timeout=300)


def _full_in_this_process(args: list[str], after: int, err: str) -> Result:
    """The same injection, run here around the CLI in this process and undone after."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records.SampleWriter, "append", records.SampleWriter.append)
        mp.setattr(os, "fsync", os.fsync)
        mp.setenv("ABGATE_TEST_DISK_FULL_AFTER", str(after))
        mp.setenv("ABGATE_TEST_DISK_ERRNO", err)
        exec(INJECT, {"__name__": "inject"})
        return cli(*args)


# (after, errno, whether the CLI is a subprocess: once through the real process, whose
# whole stderr is then seen; the other cases in this process, where they are cheaper)
@pytest.mark.parametrize(("after", "err", "subprocess_cli"),
                         [(-1, "ENOSPC", False), (0, "ENOSPC", False), (5, "ENOSPC", True),
                          (3, "EROFS", False)])
def test_disk_full_mid_run_is_one_line_and_keeps_the_samples(tmp_path: Path, after: int,
                                                              err: str,
                                                              subprocess_cli: bool) -> None:
    """ENOSPC: the disk fills up; EROFS: the file system turns read-only mid-run (what a
    read-only directory does to the writes; root ignores permission bits)."""
    out = tmp_path / "R"
    with FaultServer() as fs:
        args = ["run", "--engine", "openai", "--endpoint", fs.url, "--suite", "synthetic",
                "--limit", "8", "--max-tokens", "6", "-o", str(out)]
        r: subprocess.CompletedProcess[str] | Result = (
            _full_in_a_subprocess(args, tmp_path, after, err) if subprocess_cli
            else _full_in_this_process(args, after, err))
        assert r.returncode == 1, r.stderr
        lines = error_lines(r.stderr)
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert os.strerror(getattr(errno, err)) in lines[0] and str(out) in lines[0], lines[0]
        assert not list(out.glob("*.tmp"))  # no partial record left
        if after >= 0:
            # the samples before the failure are kept (the failing one's line reached
            # the file before its fsync failed), and run.json is its last good version
            assert len(read_lines(out / "samples.jsonl")) in (after, after + 1)
            assert json.loads((out / "run.json").read_text())["status"] == "running"
        else:
            assert not (out / "run.json").exists()
        # space again: the resume finishes the run (a fresh start without a run.json)
        r = cli("run", "--resume", str(out)) if after >= 0 else cli(*args, "--force")
        assert r.returncode == 0, r.stderr
    samples = read_lines(out / "samples.jsonl")
    assert len(samples) == 8 and len({s["key"] for s in samples}) == 8
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
