"""Source revisions as A/B arms: each revision checked out into its own git worktree in
abgate's cache and built once by the declared command, cached by the revision's tree.

```toml
[source]
repository = "."                       # the engine's git repository
base = "main"                          # or: abgate ab FILE --rev BASE..HEAD
head = "HEAD"
build = "python -m venv --system-site-packages {venv} && {venv}/bin/pip install --no-deps ."
artifacts = "venv"                     # hashed after the build, relative to {build}
```

The cache is ``$ABGATE_CACHE`` (default ``$XDG_CACHE_HOME/abgate``, ``~/.cache/abgate``)
``/builds/<tree>-<command digest>/``: ``src/`` (the worktree, detached at the
revision), ``venv/`` (``{venv}``), ``build.log``, and ``build.json`` (the manifest:
revision, commit, tree, command, duration, artifact hashes), written last; a directory
without it, or whose artifacts no longer hash to it, is built again. In the command ``{build}`` is
the build directory, ``{src}`` the worktree, ``{venv}`` the per-revision venv,
``{python}`` the interpreter abgate runs on. The command runs in ``{src}``.

Bad input is one line, exit 2, and leaves nothing in the cache: a revision that does
not exist, a dirty repository, a build command missing, a build that fails (its log
tail quoted).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from abgate.digest_store import cache_dir
from abgate.errors import UsageError, one_line
from abgate.identity import sha256_bytes, sha256_file
from abgate.provenance.gitinfo import git_text, toplevel
from abgate.safefs import write_atomic

MANIFEST = "build.json"
LOG = "build.log"
LOG_TAIL_LINES = 8


class BuildManifest(BaseModel):
    """What one revision's build was: written as ``build.json`` beside the build."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    revision: str
    commit: str
    tree: str
    command: str
    directory: str
    duration_s: float
    artifacts_digest: str
    artifacts: dict[str, str]


@dataclass(frozen=True)
class Build:
    manifest: BuildManifest
    cached: bool  # True when an earlier run built it and this one built nothing

    @property
    def directory(self) -> Path:
        return Path(self.manifest.directory)

    @property
    def python(self) -> Path:
        """The per-revision interpreter (``{venv}/bin/python``)."""
        return self.directory / "venv" / "bin" / "python"


def parse_rev_range(text: str) -> tuple[str, str]:
    """``BASE..HEAD`` as its two revisions, else a UsageError."""
    base, sep, head = text.partition("..")
    if not sep or not base or not head or head.startswith("."):
        raise UsageError(f"--rev {text!r}: expected BASE..HEAD (two revisions, e.g. "
                         "main..HEAD)")
    return base, head


def cache_root() -> Path:
    """abgate's build cache: ``$ABGATE_CACHE`` or ``$XDG_CACHE_HOME/abgate``."""
    return cache_dir() / "builds"


def repository(path: Path) -> Path:
    """The work tree of ``path``, refused when it is not a git checkout or is dirty."""
    top = toplevel(path)
    if top is None:
        raise UsageError(f"[source] repository {path}: not a git checkout")
    dirty = git_text(top, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        first = dirty.splitlines()[0].strip()
        raise UsageError(f"[source] repository {top} has uncommitted changes ({first}"
                         "...): commit or stash them, the build is of committed trees")
    return top


def resolve(repo: Path, rev: str) -> tuple[str, str]:
    """(commit, tree) of ``rev`` in ``repo``, or a UsageError naming it."""
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                           f"{rev}^{{commit}}"], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise UsageError(f"[source] revision {rev!r} does not exist in {repo}")
    commit = proc.stdout.strip()
    return commit, git_text(repo, "rev-parse", f"{commit}^{{tree}}")


def check_command(command: str) -> None:
    """A UsageError when the build command is missing."""
    if not command.strip():
        raise UsageError("[source] build is missing: the command that builds a revision "
                         "(e.g. cmake -B build && cmake --build build -j)")


def check_artifacts(build: Build, artifacts: str) -> None:
    """A UsageError when ``build``'s artifacts are no longer those its manifest hashed."""
    _, digest = _hash_artifacts(build.directory, artifacts)
    if digest != build.manifest.artifacts_digest:
        raise UsageError(f"the build of {build.manifest.revision} in {build.directory} "
                         "changed since it was built (its artifacts' hashes differ from "
                         f"{MANIFEST}): remove that directory to build it again")


def build_revision(repo: Path, rev: str, command: str, artifacts: str = "venv",
                   root: Path | None = None) -> Build:
    """Build ``rev`` of ``repo`` once by ``command`` (cached by its tree)."""
    check_command(command)
    top = repository(repo)
    commit, tree = resolve(top, rev)
    key = f"{tree}-{sha256_bytes(command.encode())[:12]}"
    where = (root or cache_root()) / key
    done = _read_manifest(where)
    if done is not None and _intact(done, artifacts):
        return Build(done, cached=True)
    _discard(top, where)  # an interrupted or damaged build: built again
    return Build(_build(top, rev, commit, tree, command, artifacts, where), cached=False)


def _intact(manifest: BuildManifest, artifacts: str) -> bool:
    """Whether a cached build's artifacts are still those its manifest hashed."""
    try:
        check_artifacts(Build(manifest, cached=True), artifacts)
    except UsageError:
        return False
    return True


def _read_manifest(where: Path) -> BuildManifest | None:
    path = where / MANIFEST
    if not path.is_file():
        return None
    return BuildManifest.model_validate_json(path.read_bytes())


def _build(top: Path, rev: str, commit: str, tree: str, command: str, artifacts: str,
           where: Path) -> BuildManifest:
    where.mkdir(parents=True)
    src = where / "src"
    try:
        git_text(top, "worktree", "add", "--detach", str(src), commit)
        duration = _run_build(rev, command, where, src)
        hashes, digest = _hash_artifacts(where, artifacts)
        manifest = BuildManifest(
            revision=rev, commit=commit, tree=tree, command=command,
            directory=str(where), duration_s=round(duration, 3),
            artifacts=hashes, artifacts_digest=digest)
    except BaseException:
        _discard(top, where)
        raise
    write_atomic(where / MANIFEST, manifest.model_dump_json(indent=2).encode() + b"\n")
    return manifest


def _run_build(rev: str, command: str, where: Path, src: Path) -> float:
    shown = command
    for name, value in (("build", where), ("src", src), ("venv", where / "venv"),
                        ("python", Path(sys.executable))):
        shown = shown.replace("{" + name + "}", str(value))
    start = time.monotonic()
    with open(where / LOG, "wb") as log:
        proc = subprocess.run(shown, shell=True, cwd=src, stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              check=False)
    if proc.returncode != 0:
        tail = (where / LOG).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        raise UsageError(f"[source] build of {rev} failed (exit {proc.returncode}): "
                         + one_line(" | ".join(tail), 400))
    return time.monotonic() - start


def _hash_artifacts(where: Path, artifacts: str) -> tuple[dict[str, str], str]:
    base = where / artifacts
    if not base.exists():
        raise UsageError(f"[source] artifacts {artifacts!r}: the build made no "
                         f"{base.relative_to(where)}")
    files = [base] if base.is_file() else sorted(
        p for p in base.rglob("*") if (p.is_file() or p.is_symlink())
        and "__pycache__" not in p.parts)
    hashes = {str(p.relative_to(where)): _entry_hash(p) for p in files}
    listing = "".join(f"{h}  {n}\n" for n, h in hashes.items())
    return hashes, hashlib.sha256(listing.encode()).hexdigest()


def _entry_hash(path: Path) -> str:
    """A file's SHA-256; a link's is that of ``link:`` and its target (a venv's
    interpreter is a link: removing or repointing it changes the digest)."""
    if path.is_symlink():
        return sha256_bytes(b"link:" + os.readlink(path).encode())
    return sha256_file(path)


def _discard(top: Path, where: Path) -> None:
    """Remove an unfinished build directory and its worktree registration."""
    if (where / "src").exists():
        subprocess.run(["git", "-C", str(top), "worktree", "remove", "--force",
                        str(where / "src")], capture_output=True, check=False)
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "-C", str(top), "worktree", "prune"], capture_output=True,
                   check=False)
