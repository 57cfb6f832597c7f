"""``abgate attach`` checks what it can of the record's source tree (issue 35, item
6): the recorded commit's tree, recomputed by git in --repo, must be recorded and equal;
a record that does not say it was clean is refused; ``--require-signature
--allowed-signers`` attaches only a directory signed by an allowed key, every file
(the record's git facts among them) as signed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from abgate.provenance.attach import AttachRefused, attach
from abgate.records.documents import RunRecord
from abgate.records.sections import GitState
from abgate.runner.documents import read_record
from tests.support.fake import RUN_FLAGS, cli
from tests.support.records import edit_record

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> str:
    import os
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **ENV}).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "engine.py").write_text("FAST = True\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "measured")
    return root


@pytest.fixture
def measured(repo: Path, tmp_path: Path) -> Path:
    """A real fake-engine run made in ``repo`` (its git facts recorded by abgate)."""
    out = tmp_path / "run"
    r = cli("run", *RUN_FLAGS, "--limit", "2", "--seeds", "0", "-o", str(out), cwd=repo)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "run.json").read_text())["git"]["tree"]
    git(repo, "commit", "-q", "--allow-empty", "-m", "merged, same tree")
    return out


def _git_facts(out: Path, **facts: object) -> None:
    """run.json's git facts with ``facts`` set (None: the fact left out, as an older
    record lacks it), through the typed record."""
    doc = read_record(out / "run.json", "run", model=RunRecord)
    assert doc.git is not None
    kept = {k: v for k, v in {**doc.git.to_dict(), **facts}.items() if v is not None}
    edit_record(out / "run.json", git=GitState.model_validate(kept))


def test_a_record_without_a_tree_hash_or_clean_flag_is_refused(repo: Path,
                                                               measured: Path) -> None:
    """Old code attached both: it compared the tree only when one was recorded and
    refused only dirty=true."""
    assert attach(measured, "HEAD", repo).tree == git(repo, "rev-parse", "HEAD^{tree}")
    (measured / "attachments.jsonl").unlink()
    _git_facts(measured, tree=None)
    with pytest.raises(AttachRefused, match="no tree hash"):
        attach(measured, "HEAD", repo)
    _git_facts(measured, tree=git(repo, "rev-parse", "HEAD^{tree}"), dirty=None)
    with pytest.raises(AttachRefused, match="does not say whether the tree was clean"):
        attach(measured, "HEAD", repo)
    assert not (measured / "attachments.jsonl").exists()


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_require_signature(repo: Path, measured: Path, tmp_path: Path) -> None:
    key = tmp_path / "alice"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True, capture_output=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"alice {key.with_suffix('.pub').read_text()}")
    args = ["attach", str(measured), "--commit", "HEAD", "--repo", str(repo)]
    alone = cli(*args, "--require-signature")
    assert alone.returncode == 2 and "go together" in alone.stderr
    signed = [*args, "--require-signature", "--allowed-signers", str(allowed)]
    unsigned = cli(*signed)
    assert unsigned.returncode == 1 and "not signed" in unsigned.stderr, unsigned.stderr
    assert cli("sign", str(measured), "--key", str(key)).returncode == 0
    ok = cli(*signed)
    assert ok.returncode == 0 and "identical tree" in ok.stdout, ok.stderr
    other = git(repo, "rev-parse", "HEAD")  # the record's commit claimed otherwise
    _git_facts(measured, commit=other)
    edited = cli(*signed)
    assert edited.returncode == 1 and "run.json: changed since it was signed" in \
        edited.stderr, edited.stderr
