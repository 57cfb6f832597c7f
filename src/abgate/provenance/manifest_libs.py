"""A manifest's libraries against the files on disk at run start and against what each
engine process mapped after the load.

- :func:`rehash_libraries`: every library the manifest lists is hashed again (git-ignored
  build outputs included: the manifest names them by path, git is not asked); one that
  changed or is gone is a difference that makes the manifest stale.
- :func:`match_processes`: per process (and rank) of the engine, which of its mapped
  shared libraries are the manifest's (same real path, same SHA-256: ``matched``), which
  are another build of a library the manifest names (same basename, another path or
  content: ``differed``), which manifest libraries it did not map (``not_mapped``), and
  which of its libraries the manifest does not name (``unnamed``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.identity import DEFAULT_CACHE, HashCache
from abgate.provenance.libmaps import MappedLib, WorkerMapping
from abgate.provenance.manifest_model import Manifest
from abgate.provenance.paths import resolve_entry
from abgate.records.sections import DifferedLib, ProcessMatch

__all__ = ["DifferedLib", "ManifestLib", "ProcessMatch", "manifest_libs", "match_processes",
           "rehash_libraries"]


@dataclass(frozen=True)
class ManifestLib:
    """One library entry of a manifest: as written, where it is (real path), its hash."""

    entry: str
    path: str
    sha256: str

    @property
    def basename(self) -> str:
        return os.path.basename(self.path)


def manifest_libs(manifest: Manifest | Mapping[str, Any], root: Path) -> list[ManifestLib]:
    """The manifest's ``libraries``, resolved under ``root`` (absolute entries as is)."""
    out = []
    for e in Manifest.of(manifest).libraries:
        try:
            where = resolve_entry(root, e.path, "library")
        except UsageError:
            where = root / e.path
        out.append(ManifestLib(e.path, os.path.realpath(where), e.sha256))
    return out


def rehash_libraries(manifest: Manifest | Mapping[str, Any], root: Path,
                     cache: HashCache = DEFAULT_CACHE) -> list[str]:
    """One line per manifest library that is gone or whose SHA-256 changed since."""
    out = []
    for lib in manifest_libs(manifest, root):
        try:
            now = cache.hash(Path(lib.path)).sha256
        except OSError as exc:
            out.append(f"library {lib.entry}: {exc.strerror or 'unreadable'} now")
            continue
        if now != lib.sha256:
            out.append(f"library {lib.entry}: sha256 {lib.sha256[:12]} -> {now[:12]}")
    return out


def _differed(lib: MappedLib, want: ManifestLib) -> DifferedLib:
    real = os.path.realpath(lib.path)
    if real != want.path:
        why = f"another copy: {lib.path} instead of {want.path}"
    elif lib.deleted:
        why = "the mapped file was replaced or deleted after it was mapped"
    else:
        why = f"sha256 {str(lib.sha256)[:12]}, the manifest has {want.sha256[:12]}"
    return DifferedLib(path=lib.path, sha256=lib.sha256, manifest_path=want.path,
                       manifest_sha256=want.sha256, why=why)


def _match_one(worker: WorkerMapping, libs: Sequence[ManifestLib]) -> ProcessMatch:
    by_path = {lib.path: lib for lib in libs}
    by_name = {lib.basename: lib for lib in libs}
    matched, differed, unnamed = [], [], []
    seen: set[str] = set()
    for mapped in worker.libs:
        real = os.path.realpath(mapped.path)
        want = by_path.get(real) or by_name.get(os.path.basename(real)) \
            or by_name.get(mapped.basename)
        if want is None:
            unnamed.append(mapped.path)
        elif real == want.path and not mapped.deleted and mapped.sha256 == want.sha256:
            matched.append(want.entry)
            seen.add(want.path)
        else:
            differed.append(_differed(mapped, want))
            seen.add(want.path)
    missing = tuple(lib.entry for lib in libs if lib.path not in seen)
    return ProcessMatch(pid=worker.pid, role=worker.role, rank=worker.rank, matched=matched,
                        differed=differed, not_mapped=[] if worker.error else list(missing),
                        unnamed=unnamed, error=worker.error)


def match_processes(manifest: Manifest | Mapping[str, Any], root: Path,
                    mappings: Sequence[WorkerMapping]) -> list[ProcessMatch]:
    """Each process's mapped libraries against the manifest's (see the module doc)."""
    libs = manifest_libs(manifest, root)
    return [_match_one(worker, libs) for worker in mappings]
