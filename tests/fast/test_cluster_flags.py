"""``--cluster`` / ``--cluster-opt`` of ``bench`` and ``baseline check``: bad input is a
one-line error, exit 2, before any engine loads and with nothing written (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake import cli


@pytest.mark.parametrize(("args", "named"), [
    (["--cluster-opt", "replicas=2"], "--cluster-opt needs --cluster"),
    (["--cluster", "nowhere"], "--cluster 'nowhere'"),
    (["--cluster", "local", "--cluster-opt", "replica=2"], "unknown key(s) ['replica']"),
    (["--cluster", "local", "--load", "concurrency:4"], "--cluster with --load"),
])
def test_bench_cluster_bad_input(tmp_path: Path, args: list[str], named: str) -> None:
    out = tmp_path / "b"
    res = cli("bench", "--engine", "fake", *args, "-o", str(out))
    assert res.returncode == 2, res.stdout + res.stderr
    assert named in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_baseline_check_cluster_opt_needs_cluster(tmp_path: Path) -> None:
    res = cli("baseline", "check", str(tmp_path), "--cluster-opt", "replicas=2")
    assert res.returncode == 2 and "--cluster-opt needs --cluster" in res.stderr
