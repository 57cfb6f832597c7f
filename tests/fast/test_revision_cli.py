"""``abgate ab FILE --rev BASE..HEAD``: bad input is one line, exit 2, before anything is
measured or written, with nothing left in the build cache (a revision that does not
exist, a failing build with its log tail, a dirty worktree, a missing build command, arms
that do not run their build or differ in more than the source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import abgate
from tests.support.engine_repo import BUILD, LAUNCH, make_engine_repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engine") / "repo"
    make_engine_repo(path)
    return path


def write(tmp: Path, repo: Path, build: str | None = BUILD, head_launch: str = LAUNCH,
          launch: str = LAUNCH) -> Path:
    source = f'repository = "{repo}"\n' + (f'build = "{build}"\n' if build is not None
                                           else "")
    path = tmp / "pr.toml"
    path.write_text(f"""name = "pr"
[source]
{source}
[shared]
suite = "synthetic"
limit = 2
engine = "openai"
engine_options = {{ launch = "{launch}" }}
[evidence]
agreement = false
probes = false
[arms.base]
[arms.head]
engine_options = {{ launch = "{head_launch}" }}
""")
    return path


def refused(tmp: Path, file: Path, rev: str, *expected: str) -> None:
    out, cache = tmp / "AB", tmp / "cache"
    r = abgate("ab", str(file), "--rev", rev, "-o", str(out),
               env={"ABGATE_CACHE": str(cache)})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for text in expected:
        assert text in r.stderr, r.stderr
    assert not out.exists()  # nothing measured, nothing written
    builds = cache / "builds"
    assert not builds.exists() or list(builds.iterdir()) == []


def test_a_revision_that_does_not_exist(tmp_path: Path, repo: Path) -> None:
    refused(tmp_path, write(tmp_path, repo), "main..no-such-branch",
            "revision 'no-such-branch' does not exist")


def test_a_failing_build_shows_its_log_tail(tmp_path: Path, repo: Path) -> None:
    bad = "echo compiling && echo 'error: planted' && exit 3"
    refused(tmp_path, write(tmp_path, repo, build=bad), "main~1..main",
            "build of main~1 failed (exit 3): compiling | error: planted")


def test_a_dirty_worktree(tmp_path: Path, repo: Path) -> None:
    engine = repo / "tinyengine.py"
    before = engine.read_text()
    engine.write_text(before + "# uncommitted\n")
    try:
        refused(tmp_path, write(tmp_path, repo), "main~1..main", "uncommitted changes")
    finally:
        engine.write_text(before)


def test_a_missing_build_command(tmp_path: Path, repo: Path) -> None:
    refused(tmp_path, write(tmp_path, repo, build=None), "main~1..main",
            "[source] build is missing")


def test_arms_must_run_their_builds_and_differ_only_in_source(tmp_path: Path,
                                                              repo: Path) -> None:
    plain = LAUNCH.replace("{build}/venv/bin/python", "python")
    refused(tmp_path, write(tmp_path, repo, launch=plain, head_launch=plain),
            "main~1..main", "no arm runs its build")
    refused(tmp_path, write(tmp_path, repo, head_launch=LAUNCH + " --n_batch 64"),
            "main~1..main", "engine_options.launch differs between arms 'base' and 'head'")


def test_rev_needs_a_range_and_a_file(tmp_path: Path, repo: Path) -> None:
    refused(tmp_path, write(tmp_path, repo), "main", "expected BASE..HEAD")
    r = abgate("ab", "--rev", "a..b", "-o", str(tmp_path / "AB"))
    assert r.returncode == 2 and "--rev needs an experiment file" in r.stderr
