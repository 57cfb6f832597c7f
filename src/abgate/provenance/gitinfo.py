"""The git facts a manifest records: commit, tree hash, dirty flag, diff hash, file list."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.errors import AbgateError, UsageError
from abgate.records.sections import GitState

# Options that make diff output independent of the user's git configuration.
_DIFF_FLAGS = ("-c", "diff.noprefix=false", "-c", "core.quotepath=true")
_DIFF_ARGS = ("--no-color", "--no-ext-diff", "--binary", "--full-index", "--no-renames")


def _run(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    if shutil.which("git") is None:
        raise AbgateError("git is not installed; it is needed to read commits and trees")
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise AbgateError(f"git {' '.join(args[:2])} failed in {repo}: "
                          + (err[-1] if err else f"exit {proc.returncode}"))
    return proc


def git_text(repo: Path, *args: str) -> str:
    return _run(repo, *args).stdout.decode().strip()


def toplevel(path: Path) -> Path | None:
    """The work tree containing ``path``, or None when it is not in a git checkout."""
    if shutil.which("git") is None or not path.is_dir():
        return None
    proc = _run(path, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.decode().strip())


def resolve_commit(repo: Path, rev: str) -> str:
    """Full SHA of ``rev``; a name git does not know is a usage error."""
    proc = _run(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", rev + "^{commit}",
                check=False)
    if proc.returncode != 0:
        raise UsageError(f"{rev!r} is not a commit in {repo}")
    return proc.stdout.decode().strip()


def tree_of(repo: Path, commit: str) -> str:
    return git_text(repo, "rev-parse", "--verify", commit + "^{tree}")


def head_commit(repo: Path) -> str | None:
    proc = _run(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def name_status(repo: Path, a: str, b: str) -> list[str]:
    """``git diff --name-status A B`` lines (``M\\tpath``)."""
    out = _run(repo, "diff", "--no-color", "--no-ext-diff", "--name-status", a, b).stdout
    return [line for line in out.decode(errors="replace").splitlines() if line.strip()]


def _z_list(repo: Path, *args: str) -> list[str]:
    out = _run(repo, *args).stdout.decode(errors="surrogateescape")
    return [p for p in out.split("\0") if p]


def listed_files(root: Path) -> list[str]:
    """Files under ``root`` git tracks plus untracked ones it does not ignore (sorted)."""
    paths = _z_list(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted(set(paths))


def _ignored(path: str, ignore: Collection[str]) -> bool:
    """``path`` is in ``ignore`` or under a directory of it."""
    return path in ignore or any(path.startswith(d.rstrip("/") + "/") for d in ignore)


def _untracked(top: Path, ignore: Collection[str]) -> list[str]:
    paths = _z_list(top, "ls-files", "-z", "--others", "--exclude-standard")
    return sorted(p for p in paths if not _ignored(p, ignore))


def _ignore_relative(top: Path, ignore: Collection[Path]) -> set[str]:
    out: set[str] = set()
    for path in ignore:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(top))
        if not rel.startswith(".."):
            out.add(Path(rel).as_posix())
    return out


def _content(path: Path) -> bytes:
    if path.is_symlink():
        return os.readlink(path).encode(errors="surrogateescape")
    return path.read_bytes() if path.is_file() else b""


def git_state(root: Path, ignore: Collection[Path] = ()) -> dict[str, Any] | None:
    """Commit, tree, dirty flag and diff hash of the checkout holding ``root``.

    ``dirty`` is true when tracked files differ from HEAD or untracked, unignored
    files exist (the files in ``ignore`` — e.g. the manifest being written — do not
    count; a directory in ``ignore`` excludes everything under it, e.g. abgate's own
    output directory). ``diff_sha256`` hashes ``git diff HEAD`` plus each untracked file's name
    and content, so two dirty trees with the same edits have the same value.
    Returns None outside a git checkout.
    """
    top = toplevel(root)
    if top is None:
        return None
    commit = head_commit(top)
    tree = tree_of(top, commit) if commit else None
    skip = _ignore_relative(top, ignore)
    diff = b""
    if commit:
        excludes = [f":(exclude,literal){rel}" for rel in sorted(skip)]
        diff = _run(top, *_DIFF_FLAGS, "diff", *_DIFF_ARGS, "HEAD", "--", ".", *excludes).stdout
    h = hashlib.sha256(diff)
    untracked = _untracked(top, skip)
    if not commit:
        untracked = sorted(set(untracked) | {p for p in _z_list(top, "ls-files", "-z")
                                             if not _ignored(p, skip)})
    for rel in untracked:
        h.update(b"\0untracked\0" + rel.encode(errors="surrogateescape") + b"\0")
        h.update(hashlib.sha256(_content(top / rel)).digest())
    dirty = bool(diff) or bool(untracked)
    return {
        "commit": commit,
        "tree": tree,
        "dirty": dirty,
        "diff_sha256": h.hexdigest() if dirty else None,
    }


def git_facts(node: Any) -> GitState | None:
    """Recorded git facts (a record's ``git``, a manifest's ``source.git``) as
    :class:`GitState`, read leniently: a fact of another type is left out (unknown), the
    others kept; None when ``node`` is no object."""
    if not isinstance(node, dict):
        return None
    kept = {}
    for name, value in node.items():
        try:
            GitState.model_validate({name: value}, strict=True)
        except ValidationError:
            continue
        kept[name] = value
    return GitState.model_validate(kept, strict=True)
