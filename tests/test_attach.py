"""Tree-identity attachment of results to another commit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import abgate.cli.provenance_cmd  # noqa: F401  (registers the commands)
from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.provenance.attach import ATTACHMENTS_FILE, AttachRefused, attach
from abgate.provenance.manifest import build_manifest, write_manifest
from abgate.records.sections import GitState
from tests.support.records import edit_record, edit_sealed

runner = CliRunner()


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def tree_of(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD^{tree}")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "engine.py").write_text("FAST = True\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "measured")
    return root


GOLDEN_V1 = Path(__file__).parent / "data" / "golden" / "v1"


def results(tmp_path: Path, git_info: dict[str, object], kind: str = "run") -> Path:
    """A real ``run.json`` of ``kind`` (run or bench: v1 golden records, migrated and
    written by ``write_record``) that records ``git_info`` as its ``git``."""
    out = tmp_path / "results"
    out.mkdir(exist_ok=True)
    shutil.copyfile(GOLDEN_V1 / kind / "run.json", out / "run.json")
    edit_record(out / "run.json", git=GitState.model_validate(git_info))
    return out


def records(result_dir: Path) -> list[dict[str, object]]:
    lines = (result_dir / ATTACHMENTS_FILE).read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("kind", ["run", "bench"])
def test_identical_tree_attaches(repo: Path, tmp_path: Path, kind: str) -> None:
    tested = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    out = results(tmp_path, {"commit": tested, "tree": tree, "dirty": False}, kind)
    git(repo, "commit", "-q", "--allow-empty", "-m", "retag, same tree")
    later = git(repo, "rev-parse", "HEAD")
    done = attach(out, "HEAD", repo)
    assert (done.tested_commit, done.attached_commit, done.tree) == (tested, later, tree)
    (rec,) = records(out)
    assert rec["tested_commit"] == tested and rec["attached_commit"] == later
    assert rec["tree"] == tree
    again = attach(out, later, repo)  # recording twice does not duplicate
    assert again.already_recorded and len(records(out)) == 1


def test_different_tree_refused_listing_paths(repo: Path, tmp_path: Path) -> None:
    tested = git(repo, "rev-parse", "HEAD")
    out = results(tmp_path, {"commit": tested, "tree": tree_of(repo), "dirty": False})
    (repo / "src" / "engine.py").write_text("FAST = False\n")
    (repo / "src" / "new.py").write_text("X = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "change")
    with pytest.raises(AttachRefused) as info:
        attach(out, "HEAD", repo)
    assert info.value.paths == ["M\tsrc/engine.py", "A\tsrc/new.py"]
    assert "src/engine.py" in str(info.value)
    assert not (out / ATTACHMENTS_FILE).exists()
    res = runner.invoke(app, ["attach", str(out), "--commit", "HEAD", "--repo", str(repo)])
    assert res.exit_code == 1
    assert "src/new.py" in res.output


def test_cli_attach_success(repo: Path, tmp_path: Path) -> None:
    out = results(tmp_path, {"commit": git(repo, "rev-parse", "HEAD"), "tree": tree_of(repo),
                             "dirty": False})
    git(repo, "commit", "-q", "--allow-empty", "-m", "empty")
    res = runner.invoke(app, ["attach", str(out), "--commit", "HEAD", "--repo", str(repo)])
    assert res.exit_code == 0, res.output
    assert "identical tree" in res.output and len(records(out)) == 1


def test_commit_read_from_manifest(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    write_manifest(build_manifest(repo), out / "manifest.json")
    git(repo, "commit", "-q", "--allow-empty", "-m", "empty")
    done = attach(out, "HEAD", repo)
    assert done.origin.startswith("manifest.json")


def test_refusals(repo: Path, tmp_path: Path) -> None:
    out = results(tmp_path, {"tree": "x"})
    with pytest.raises(AttachRefused, match="cannot tell which commit"):
        attach(out, "HEAD", repo)
    head = git(repo, "rev-parse", "HEAD")
    out = results(tmp_path, {"commit": head, "dirty": True})
    with pytest.raises(AttachRefused, match="dirty tree"):
        attach(out, "HEAD", repo)
    out = results(tmp_path, {"commit": head, "tree": "0" * 40, "dirty": False})
    with pytest.raises(AttachRefused, match="inconsistent"):
        attach(out, "HEAD", repo)
    out = results(tmp_path, {"commit": head, "dirty": False})
    with pytest.raises(AttachRefused, match="no tree hash"):
        attach(out, "HEAD", repo)
    out = results(tmp_path, {"commit": head, "tree": tree_of(repo)})
    with pytest.raises(AttachRefused, match="does not say whether the tree was clean"):
        attach(out, "HEAD", repo)
    out = results(tmp_path, {"commit": head, "tree": tree_of(repo), "dirty": False})
    with pytest.raises(UsageError, match="is not a commit"):
        attach(out, "no-such-branch", repo)
    with pytest.raises(UsageError, match="does not exist"):
        attach(tmp_path / "nope", "HEAD", repo)


def test_torn_last_line_is_kept_separate(repo: Path, tmp_path: Path) -> None:
    out = results(tmp_path, {"commit": git(repo, "rev-parse", "HEAD"), "tree": tree_of(repo),
                             "dirty": False})
    (out / ATTACHMENTS_FILE).write_text('{"tested_commit": "abc"')  # crash mid-write
    attach(out, "HEAD", repo)
    lines = (out / ATTACHMENTS_FILE).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["attached_commit"]
    torn = out / (ATTACHMENTS_FILE + ".torn")
    assert torn.read_text() == '{"tested_commit": "abc"\n'


def test_a_sealed_baseline_attaches_and_an_edited_one_is_refused(repo: Path,
                                                                 tmp_path: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "baseline"
    out.mkdir()
    shutil.copyfile(GOLDEN_V1 / "baseline" / "baseline.json", out / "baseline.json")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    edit_sealed(out / "baseline.json", git=GitState(commit=head, tree=tree, dirty=False))
    git(repo, "commit", "-q", "--allow-empty", "-m", "merged, same tree")
    done = attach(out, "HEAD", repo)
    assert done.origin == "baseline.json git.commit" and done.tested_commit == head
    doc = json.loads((out / "baseline.json").read_text())
    doc["cases"][0]["output_token_ids"][1] = 3  # a reference token edited by hand
    (out / "baseline.json").write_text(json.dumps(doc))  # raw: a hostile edit
    with pytest.raises(AttachRefused, match=r"cases\[0\].*cannot vouch for a commit"):
        attach(out, "HEAD", repo)
