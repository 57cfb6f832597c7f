"""Which shared libraries an engine process and its workers actually mapped.

For each process in a tree (psutil), ``/proc/<pid>/maps`` names the files mapped
into memory; the ``.so`` files among them are the native code that process runs.
Recording them (with SHA-256) shows which build a measurement used, and
:func:`check_required` catches the classic mistake of a worker loading a stale copy
of a freshly built library (same basename, different path or content).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from abgate.engines.shared.process_roles import HELPER, process_role
from abgate.errors import UsageError
from abgate.identity import DEFAULT_CACHE, HashCache
from abgate.provenance.manifest_model import Manifest
from abgate.provenance.paths import resolve_entry
from abgate.records.sections import MappedLibRecord, MappedProcess

_SO_NAME = re.compile(r"\.so($|\.)")
_DELETED = " (deleted)"


@dataclass(frozen=True)
class MappedLib:
    """One shared library mapped by a process. ``sha256``/``size`` are None when the
    file is gone or unreadable (``deleted`` marks a file replaced after mapping)."""

    path: str
    sha256: str | None
    size: int | None
    deleted: bool = False

    @property
    def basename(self) -> str:
        return os.path.basename(self.path)


@dataclass(frozen=True)
class WorkerMapping:
    """The libraries one process had mapped when the snapshot was taken, and what the
    process is (:func:`abgate.engines.shared.process_roles.process_role`: a rank such as
    ``TP1``, an engine core, a helper)."""

    pid: int
    name: str
    cmdline: tuple[str, ...]
    libs: tuple[MappedLib, ...]
    error: str | None = None
    role: str = "process"
    rank: str | None = None

    @property
    def label(self) -> str:
        who = f"pid {self.pid} ({self.name})"
        return who if self.rank is None else f"rank {self.rank}, {who}"

    def record(self, cmdline: Sequence[str]) -> MappedProcess:
        """As recorded under ``provenance.libraries`` (``cmdline``: the command line as it
        may be recorded, secrets redacted)."""
        return MappedProcess(
            libs=[MappedLibRecord(path=m.path, sha256=m.sha256, size=m.size, deleted=m.deleted)
                  for m in self.libs],
            pid=self.pid, name=self.name, cmdline=list(cmdline), role=self.role,
            rank=self.rank, error=self.error)


def parse_maps(text: str) -> list[tuple[str, bool]]:
    """Distinct ``.so`` paths in ``/proc/<pid>/maps`` text, as (path, deleted), in order."""
    seen: dict[str, bool] = {}
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5]
        deleted = path.endswith(_DELETED)
        if deleted:
            path = path[: -len(_DELETED)]
        if _SO_NAME.search(os.path.basename(path)):
            seen.setdefault(path, deleted)
    return list(seen.items())


def _hash_mapped(path: str, deleted: bool, cache: HashCache) -> MappedLib:
    if deleted:
        return MappedLib(path=path, sha256=None, size=None, deleted=True)
    try:
        hashed = cache.hash(Path(path))
    except OSError:
        return MappedLib(path=path, sha256=None, size=None)
    return MappedLib(path=path, sha256=hashed.sha256, size=hashed.size)


def snapshot_process(proc: psutil.Process, cache: HashCache = DEFAULT_CACHE) -> WorkerMapping:
    """Mapped libraries of one process (an ``error`` instead when it cannot be read)."""
    try:
        with proc.oneshot():
            name, cmdline = proc.name(), tuple(proc.cmdline())
    except psutil.Error as exc:
        return WorkerMapping(proc.pid, "?", (), (), error=type(exc).__name__)
    role, rank = process_role(name, cmdline, proc.pid)
    try:
        with open(f"/proc/{proc.pid}/maps", encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    except OSError as exc:
        return WorkerMapping(proc.pid, name, cmdline, (), error=exc.strerror or str(exc),
                             role=role, rank=rank)
    libs = tuple(_hash_mapped(p, d, cache) for p, d in parse_maps(text))
    return WorkerMapping(proc.pid, name, cmdline, libs, role=role, rank=rank)


def snapshot_pids(pids: Iterable[int], cache: HashCache = DEFAULT_CACHE) -> list[WorkerMapping]:
    """Snapshots of the given processes; ones that already exited are skipped."""
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        out.append(snapshot_process(proc, cache))
    return out


def snapshot_tree(root_pid: int | None = None,
                  cache: HashCache = DEFAULT_CACHE) -> list[WorkerMapping]:
    """The engine process (default: this one) and every descendant, root first."""
    root = psutil.Process(os.getpid() if root_pid is None else root_pid)
    try:
        children = root.children(recursive=True)
    except psutil.Error:
        children = []
    return snapshot_pids([root.pid, *(c.pid for c in children)], cache)


@dataclass(frozen=True)
class RequiredLib:
    """A library that must be mapped: its real path and content hash."""

    path: str
    sha256: str

    @property
    def basename(self) -> str:
        return os.path.basename(self.path)


def required_from_paths(paths: Iterable[Path], cache: HashCache = DEFAULT_CACHE
                        ) -> list[RequiredLib]:
    """Required libraries as they are on disk now (e.g. expanded contract globs)."""
    return [RequiredLib(os.path.realpath(p), cache.hash(p).sha256) for p in paths]


def required_from_manifest(manifest: Manifest | Mapping[str, Any],
                           root: Path) -> list[RequiredLib]:
    """The libraries a manifest recorded, with the hashes it recorded for them."""
    return [RequiredLib(os.path.realpath(resolve_entry(root, e.path, "library")), e.sha256)
            for e in Manifest.of(manifest).libraries]


MODES = ("every", "consistent")


@dataclass(frozen=True)
class Selector:
    """Which processes a contract's ``every`` applies to: roles (``worker``,
    ``engine_core``, ``server``, ...) and rank patterns (``TP*``, ``PP1_TP0``; fnmatch);
    both empty: every process that is not a helper."""

    roles: tuple[str, ...] = ()
    ranks: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.roles or self.ranks)

    def matches(self, worker: WorkerMapping) -> bool:
        if worker.role == HELPER:
            return False
        if self.roles and worker.role not in self.roles:
            return False
        return not self.ranks or any(fnmatch.fnmatchcase(worker.rank or "", r)
                                     for r in self.ranks)

    def describe(self) -> str:
        parts = ([f"role {' or '.join(self.roles)}"] if self.roles else []) + \
            ([f"rank {' or '.join(self.ranks)}"] if self.ranks else [])
        return ", ".join(parts)


@dataclass(frozen=True)
class MappingIssue:
    """A process that mapped the wrong copy of a required library, none, or is unreadable."""

    worker: str
    required: str
    found: str | None
    reason: str

    def message(self) -> str:
        return f"{self.worker}: {self.reason}"


def _wrong_copies(req: RequiredLib, worker: WorkerMapping) -> tuple[list[MappedLib], bool]:
    same_name = [m for m in worker.libs if m.basename == req.basename]
    good = any(os.path.realpath(m.path) == req.path and m.sha256 == req.sha256
               for m in same_name)
    bad = [m for m in same_name
           if os.path.realpath(m.path) != req.path or m.sha256 != req.sha256]
    return bad, good


def _bad_copy(req: RequiredLib, worker: WorkerMapping, lib: MappedLib) -> MappingIssue:
    if os.path.realpath(lib.path) == req.path:
        state = "deleted/replaced file" if lib.deleted else f"sha256 {str(lib.sha256)[:12]}"
        reason = f"mapped {lib.path} ({state}), expected sha256 {req.sha256[:12]}"
    else:
        reason = f"mapped {lib.path} instead of {req.path}"
    return MappingIssue(worker.label, req.path, lib.path, reason)


def _worker_issues(req: RequiredLib, worker: WorkerMapping, mode: str,
                   where: Selector = Selector()) -> tuple[list[MappingIssue], bool]:
    """One process against one required library: its issues, and whether it mapped the
    right copy. A helper, or (in mode "every") a process ``where`` does not select, fails
    only for a wrong copy."""
    bound = mode == "every" and (where.matches(worker) if where else worker.role != HELPER)
    if worker.error is not None:
        if bound:
            return [MappingIssue(worker.label, req.path, None,
                                 f"mappings unreadable ({worker.error})")], False
        return [], False
    bad, good = _wrong_copies(req, worker)
    issues = [_bad_copy(req, worker, lib) for lib in bad]
    if not good and not bad and bound:
        issues.append(MappingIssue(worker.label, req.path, None,
                                   f"did not map {req.basename} ({req.path})"))
    return issues, good


def check_required(required: Sequence[RequiredLib], mappings: Sequence[WorkerMapping],
                   mode: str = "every", where: Selector = Selector()) -> list[MappingIssue]:
    """Every required library must be the mapped copy.

    A process that mapped another copy (same basename, different real path or hash)
    always fails. ``mode="every"`` also fails each process that mapped no copy at
    all or whose mappings could not be read (every rank of a tensor-parallel engine,
    named by its rank), helpers excepted (Python's multiprocessing resource tracker and
    fork server, inductor's compile workers: role ``helper``, they run no engine code);
    ``mode="consistent"`` only asks that at least one process mapped it. ``where``
    narrows "every" to processes of some roles or ranks (every TP worker: ``ranks=
    ("TP*",)``); at least one process must be selected then, and a wrong copy still
    fails in any process (no other copy is allowed).
    """
    if mode not in MODES:
        raise UsageError(f"library check mode {mode!r} is not one of {', '.join(MODES)}")
    issues: list[MappingIssue] = []
    if required and not mappings:
        return [MappingIssue("no process", r.path, None, "no process mappings were recorded")
                for r in required]
    if required and where and not any(where.matches(w) for w in mappings):
        issues.append(MappingIssue("no process", required[0].path, None,
                                   f"no process of {where.describe()} was found (roles seen: "
                                   + ", ".join(sorted({f"{w.role}/{w.rank}" for w in mappings}))
                                   + ")"))
    for req in required:
        anywhere = False
        for worker in mappings:
            found, good = _worker_issues(req, worker, mode, where)
            issues.extend(found)
            anywhere = anywhere or good
        if not anywhere and mode != "every":
            issues.append(MappingIssue("no process", req.path, None,
                                       f"no process mapped {req.path}"))
    return issues
