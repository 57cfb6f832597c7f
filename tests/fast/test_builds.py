"""Source revisions built once each into abgate's cache (abgate.provenance.builds), on a
real git repository holding a Python engine package on llama-cpp-python."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from abgate.errors import UsageError
from abgate.provenance.builds import build_revision, parse_rev_range
from tests.support.engine_repo import BUILD, git, make_engine_repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("engine") / "repo"
    return path, make_engine_repo(path)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def run_in(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], check=True, text=True,
                          capture_output=True).stdout.strip()


def test_a_revision_is_built_once_into_its_own_venv(repo: tuple[Path, dict[str, str]],
                                                     tmp_path: Path) -> None:
    path, revs = repo
    cache = tmp_path / "cache"  # its own: another test may have built the base (random order)
    first = build_revision(path, revs["base"], BUILD, root=cache)
    assert not first.cached
    m = first.manifest
    assert m.commit == revs["base"] and m.tree == git(path, "rev-parse", "main~1^{tree}")
    assert first.directory.name.startswith(m.tree)
    assert (first.directory / "build.log").is_file() and m.duration_s > 0
    assert any("tinyengine" in name for name in m.artifacts), m.artifacts
    again = build_revision(path, "main~1", BUILD, root=cache)
    assert again.cached and again.manifest == m
    # the per-revision interpreter runs that revision's code, with llama-cpp-python reused
    code = "import tinyengine, llama_cpp; print(tinyengine.format_prompt('q'))"
    assert run_in(first.python, code) == "q"


def test_each_revision_runs_its_own_code(repo: tuple[Path, dict[str, str]],
                                          cache: Path) -> None:
    path, revs = repo
    bad = build_revision(path, "regression", BUILD, root=cache)
    slow = build_revision(path, revs["slowdown"], BUILD, root=cache)
    noop = build_revision(path, "main", BUILD, root=cache)
    base = build_revision(path, revs["base"], BUILD, root=cache)
    assert len({b.directory for b in (bad, slow, noop, base)}) == 4
    assert run_in(bad.python, "import tinyengine; print(tinyengine.sampling({}))"
                  ) == "{'repeat_penalty': 0.5}"
    assert run_in(slow.python, "import tinyengine; print(tinyengine.SLEEP_S)") == "0.03"
    assert noop.manifest.artifacts_digest != base.manifest.artifacts_digest


def nothing_left(path: Path, root: Path) -> None:
    assert not root.exists() or list(root.iterdir()) == []
    assert str(root) not in git(path, "worktree", "list")


@pytest.mark.parametrize("rev,command,message", [
    ("no-such-branch", BUILD, "revision 'no-such-branch' does not exist"),
    ("main", "  ", "build is missing"),
    ("main", "echo compiling && echo 'error: planted' && exit 3",
     "build of main failed (exit 3): compiling | error: planted"),
])
def test_bad_input_is_one_line_and_leaves_nothing(repo: tuple[Path, dict[str, str]],
                                                   tmp_path: Path, rev: str,
                                                   command: str, message: str) -> None:
    path, _ = repo
    with pytest.raises(UsageError, match=re.escape(message)) as err:
        build_revision(path, rev, command, root=tmp_path / "builds")
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    nothing_left(path, tmp_path / "builds")


def test_a_dirty_repository_is_refused(repo: tuple[Path, dict[str, str]],
                                       tmp_path: Path) -> None:
    path, _ = repo
    engine = path / "tinyengine.py"
    before = engine.read_text()
    engine.write_text(before + "# uncommitted\n")
    try:
        with pytest.raises(UsageError, match="uncommitted changes"):
            build_revision(path, "main", BUILD, root=tmp_path / "builds")
    finally:
        engine.write_text(before)
    nothing_left(path, tmp_path / "builds")


@pytest.mark.parametrize("text", ["main", "..HEAD", "main..", "a...b"])
def test_a_range_needs_two_revisions(text: str) -> None:
    with pytest.raises(UsageError, match="expected BASE..HEAD"):
        parse_rev_range(text)


def test_a_range_names_base_and_head() -> None:
    assert parse_rev_range("main..HEAD") == ("main", "HEAD")


def test_a_damaged_cached_build_is_built_again(repo: tuple[Path, dict[str, str]],
                                               tmp_path: Path) -> None:
    path, revs = repo
    first = build_revision(path, revs["base"], BUILD, root=tmp_path)
    (first.python).unlink()  # e.g. a cache half cleaned: the manifest outlives the venv
    again = build_revision(path, revs["base"], BUILD, root=tmp_path)
    assert not again.cached and again.python.exists()
    assert again.manifest.artifacts_digest == first.manifest.artifacts_digest
