"""Build a provenance manifest: source tree, native libraries, model files, environment.

A manifest is a JSON object sealed by ``digest``: the SHA-256 of its canonical JSON
(sorted keys, no whitespace) without the ``digest`` field. Paths are posix and
relative to the root the manifest was built from, except libraries and models given
as absolute paths (recorded absolute). See docs/provenance.md for the full format.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate import __version__, safefs
from abgate.errors import AbgateError, UsageError
from abgate.identity import (
    DEFAULT_CACHE,
    SAMPLE_CHUNK_BYTES,
    SAMPLE_CHUNKS,
    HashCache,
    sampled_sha256,
    sha256_bytes,
)
from abgate.provenance import gitinfo
from abgate.provenance.environment import environment_snapshot
from abgate.provenance.manifest_model import (
    LibraryFile,
    Manifest,
    ManifestParams,
    ManifestSource,
    ModelEntry,
    ModelFile,
    SourceFile,
)
from abgate.provenance.manifest_model import content_digest as content_digest  # re-exported
from abgate.provenance.paths import (
    PathEscape,
    entry_name,
    expand_patterns,
    resolve_inside,
    select,
)

SCHEMA = "abgate.manifest"
SCHEMA_VERSION = 1
#: Always excluded from the source fingerprint (bytecode appears as soon as code runs).
DEFAULT_EXCLUDE = ("__pycache__", "*.pyc")


@dataclass(frozen=True)
class BuildOptions:
    """What to put in a manifest; recorded under ``params`` so ``verify`` can redo it."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    sampled_model_hash: bool = False
    env_vars: tuple[str, ...] = ()

    def to_params(self) -> dict[str, Any]:
        return {
            "include": list(self.include),
            "exclude": sorted(set(self.exclude) | set(DEFAULT_EXCLUDE)),
            "libs": list(self.libs),
            "models": list(self.models),
            "model_hash_mode": "sampled" if self.sampled_model_hash else "full",
            "env_vars": list(self.env_vars),
        }

    @classmethod
    def from_params(cls, params: ManifestParams) -> BuildOptions:
        return cls(
            include=tuple(params.include),
            exclude=tuple(params.exclude),
            libs=tuple(params.libs),
            models=tuple(params.models),
            sampled_model_hash=params.model_hash_mode == "sampled",
            env_vars=tuple(params.env_vars),
        )


@dataclass
class TreeScan:
    """Files selected from the source tree, and those refused for escaping the root."""

    listing: str
    files: list[SourceFile] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # path -> reason


def file_mode(st: os.stat_result) -> str:
    """git-style mode: 120000 symlink, 100755 executable, 100644 otherwise."""
    if stat.S_ISLNK(st.st_mode):
        return "120000"
    return "100755" if st.st_mode & stat.S_IXUSR else "100644"


def tree_file_entry(root: Path, rel: str, cache: HashCache) -> SourceFile:
    """Path, mode, size and SHA-256 of one source file (a symlink hashes its target text)."""
    full = resolve_inside(root, rel, "file")
    st = os.lstat(full)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(full).encode(errors="surrogateescape")
        return SourceFile(path=rel, mode="120000", size=len(target),
                          sha256=sha256_bytes(target))
    hashed = cache.hash(full)
    return SourceFile(path=rel, mode=file_mode(st), size=hashed.size, sha256=hashed.sha256)


def _walk(root: Path, exclude: Sequence[str] = ()) -> list[str]:
    """Every file and symlink under ``root`` (not following links; excluded dirs pruned)."""
    out: list[str] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        base = Path(here)
        linked = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = sorted(
            d for d in dirs if d != ".git" and d not in linked
            and select((base / d).relative_to(root).as_posix(), (), exclude)
        )
        for name in [*files, *linked]:
            out.append((base / name).relative_to(root).as_posix())
    return sorted(out)


def list_tree(root: Path, listing: str | None = None,
              exclude: Sequence[str] = ()) -> tuple[str, list[str]]:
    """(listing mode, candidate paths): git's view when in a checkout, else a walk."""
    if listing != "walk" and gitinfo.toplevel(root) is not None:
        return "git", gitinfo.listed_files(root)
    return "walk", _walk(root, exclude)


def scan_tree(root: Path, include: Sequence[str], exclude: Sequence[str],
              listing: str | None = None, ignore: Collection[str] = (),
              cache: HashCache = DEFAULT_CACHE) -> TreeScan:
    mode, candidates = list_tree(root, listing, exclude)
    scan = TreeScan(listing=mode)
    for rel in candidates:
        full = root / rel
        if rel in ignore or not select(rel, include, exclude) or not os.path.lexists(full):
            continue
        if full.is_dir() and not full.is_symlink():
            continue  # a submodule: its own checkout, not part of this tree
        try:
            scan.files.append(tree_file_entry(root, rel, cache))
        except PathEscape as exc:
            scan.refused[rel] = str(exc)
    return scan


def fingerprint(files: Iterable[SourceFile | Mapping[str, Any]]) -> str:
    """``sha256:<hex>`` over the sorted (path, mode, content hash) list."""
    h = hashlib.sha256()
    entries = [f if isinstance(f, SourceFile) else SourceFile.model_validate(dict(f))
               for f in files]
    for entry in sorted(entries, key=lambda e: e.path):
        h.update(f"{entry.path}\0{entry.mode}\0{entry.sha256}\n".encode())
    return "sha256:" + h.hexdigest()


def hash_libraries(root: Path, patterns: Sequence[str], cache: HashCache = DEFAULT_CACHE,
                   strict: bool = True) -> list[LibraryFile]:
    """Size and SHA-256 of every file the patterns name (``strict``: each must match)."""
    out = []
    for path in expand_patterns(root, patterns, "library pattern", strict):
        hashed = cache.hash(path)
        out.append(LibraryFile(path=entry_name(root, path), size=hashed.size,
                               sha256=hashed.sha256))
    return sorted(out, key=lambda e: e.path)


def model_file_entry(path: Path, name: str, sampled: bool,
                     cache: HashCache = DEFAULT_CACHE) -> ModelFile:
    if sampled:
        return ModelFile(path=name, size=path.stat().st_size,
                         sampled_sha256=sampled_sha256(path))
    hashed = cache.hash(path)
    return ModelFile(path=name, size=hashed.size, sha256=hashed.sha256)


def _model_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and ".git" not in p.parts)
    raise UsageError(f"model path {str(path)!r} does not exist")


def hash_model(root: Path, given: str, sampled: bool,
               cache: HashCache = DEFAULT_CACHE) -> ModelEntry:
    """One ``--model`` entry: a file, or every file under a directory."""
    path = Path(given) if os.path.isabs(given) else root / given
    name = entry_name(root, path)
    is_dir = path.is_dir()
    files = []
    for file in _model_files(path):
        file_name = f"{name}/{file.relative_to(path).as_posix()}" if is_dir else name
        files.append(model_file_entry(file, file_name, sampled, cache))
    entry = ModelEntry(path=name, kind="directory" if is_dir else "file",
                       hash_mode="sampled" if sampled else "full", files=files)
    if sampled:
        entry.sample = {"chunks": SAMPLE_CHUNKS, "chunk_bytes": SAMPLE_CHUNK_BYTES}
    return entry


def build_manifest(root: Path | str, options: BuildOptions | None = None, *,
                   ignore: Collection[Path] = (), cache: HashCache = DEFAULT_CACHE,
                   listing: str | None = None) -> dict[str, Any]:
    """Hash the tree, libraries and models under ``root`` and seal the result.

    ``ignore`` lists files (e.g. the manifest's own output path) that must not count
    as source files or make the tree dirty. Raises :class:`UsageError` when a path
    escapes the root or a pattern matches nothing.
    """
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"root {str(root)!r} is not a directory")
    opts = options or BuildOptions()
    params = ManifestParams.model_validate(opts.to_params())
    skip = {entry_name(root, Path(p)) for p in ignore}
    scan = scan_tree(root, params.include, params.exclude, listing, skip, cache)
    if scan.refused:
        more = f" (and {len(scan.refused) - 1} more)" if len(scan.refused) > 1 else ""
        raise PathEscape(next(iter(scan.refused.values())) + more)
    source = ManifestSource(
        listing="git" if scan.listing == "git" else "walk",
        git=gitinfo.git_state(root, ignore) if scan.listing == "git" else None,
        fingerprint=fingerprint(scan.files), file_count=len(scan.files), files=scan.files)
    manifest = Manifest.model_validate({
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "abgate_version": __version__,
        "params": params,
        "source": source,
        "libraries": hash_libraries(root, opts.libs, cache),
        "models": [hash_model(root, m, opts.sampled_model_hash, cache) for m in opts.models],
        "environment": environment_snapshot(opts.env_vars),
        "digest": "",
    })
    manifest.digest = manifest.content_digest()
    return manifest.to_dict()


def write_manifest(manifest: dict[str, Any], path: Path | str) -> None:
    """Write readable JSON atomically (temp file, fsync, rename)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        fd = safefs.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # never a link
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2, sort_keys=True, ensure_ascii=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        safefs.refuse_link(target)  # replacing a link would delete it
        os.replace(tmp, target)
    except (OSError, AbgateError) as exc:
        if not safefs.is_link(tmp):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, AbgateError):
            raise
        raise AbgateError(f"cannot write manifest {target}: {exc.strerror or exc}") from None
