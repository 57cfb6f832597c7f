"""Output directories abgate owns: claimed (one writer), created, and cleared by
``--force`` only when every entry is abgate's own.

A directory is *abgate's* when its marker (``run.json``, ``ab.json``,
``baseline.json``) is a valid abgate record and every file in it has a name abgate
writes (records, samples, logs, reports, ``arms/<arm>/...``). ``--force`` on anything
else (a project's checkout with a stray ``run.json``, a directory with a user's
notes) is refused, naming the first foreign entry, and nothing is deleted.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from abgate.dirlock import LOCK_FILE, check_outer_writer, exclusive
from abgate.errors import AbgateError, UsageError
from abgate.runner.documents import read_record
from abgate.safefs import is_link, link_refusal, open_fd, refuse_link

# Every name abgate writes in an output directory (and in an A/B's arms/<arm>/, a cluster
# bench's replicas/<i>/).
OWNED_FILES = frozenset({
    "run.json", "samples.jsonl", "summary.json", "run.log", "ab.json", "comparison.json",
    "agreement.jsonl", "probes.json", "bench.json", "baseline.json", "report.md",
    "report.html", "report.json", "manifest.json", "attachments.jsonl", "decisions.jsonl",
    "cluster.json", LOCK_FILE,
    ".abgate-write-test", "signed-files.json", "signed-files.json.sig",
    "load.json", "load_samples.jsonl"})  # a served load bench (bench.load_run)
# Directories of runs abgate writes inside its own: an A/B's arms, a cluster bench's replicas.
NESTED = ("arms", "replicas")
OWNED_PATTERNS = ("server-*.log", "engine-*.log", "weights-diff-*.json", "*.tmp",
                  "*.jsonl.torn")  # a torn last line cut off (abgate.jsonl_append)


def _owned_file(name: str) -> bool:
    return name in OWNED_FILES or any(fnmatch.fnmatchcase(name, p) for p in OWNED_PATTERNS)


def foreign_entries(out: Path) -> Iterator[Path]:
    """Entries of ``out`` abgate did not write (``arms/<arm>/`` is looked into)."""
    for entry in sorted(out.iterdir()):
        if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
            yield entry
        elif entry.is_dir():
            if entry.name not in NESTED:
                yield entry
                continue
            for arm in sorted(entry.iterdir()):
                if arm.is_symlink() or not arm.is_dir():
                    yield arm
                    continue
                yield from (f for f in sorted(arm.iterdir())
                            if f.is_symlink() or not f.is_file() or not _owned_file(f.name))
        elif not _owned_file(entry.name):
            yield entry


def _contents(out: Path) -> list[Path]:
    """What ``out`` holds, its lock file aside (a link of that name is not one)."""
    return [e for e in out.iterdir() if e.name != LOCK_FILE or e.is_symlink()]


def refuse_links(out: Path) -> None:
    """A link among ``out``'s entries, its arms' directories or their entries (which
    abgate writes and deletes) is a one-line UsageError naming it; writes nothing."""
    if not out.is_dir():
        return
    places = [out]
    for nested in (out / name for name in NESTED):
        if not is_link(nested) and nested.is_dir():
            places += [nested, *(a for a in sorted(nested.iterdir()) if a.is_dir())]
    for place in places:
        for entry in sorted(place.iterdir()):
            if entry.is_symlink():
                raise link_refusal(entry)


def check_new_dir(out: Path, force: bool, marker: str) -> None:
    """Whether ``out`` may take a new run: absent, empty, or (with ``force``) abgate's
    own. Writes nothing."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path {out} exists and is not a directory")
    refuse_link(out / LOCK_FILE)
    check_outer_writer(out)  # inside a record another process writes: refused now
    if not out.exists() or not _contents(out):
        return
    if not force:
        raise UsageError(f"directory {out} is not empty; use --resume to continue "
                         "it or --force to overwrite it")
    if not (out / marker).is_file():
        raise UsageError(f"--force refuses to clear {out}: it holds no {marker}, so it "
                         "may not be an abgate directory")
    try:
        read_record(out / marker)
    except AbgateError as exc:
        raise UsageError(f"--force refuses to clear {out}: its {marker} is not a valid "
                         f"abgate record ({exc})") from None
    for entry in foreign_entries(out):
        raise UsageError(f"--force refuses to clear {out}: {entry.relative_to(out)} was "
                         "not written by abgate; move it away or choose another directory")


def prepare_new_dir(out: Path, force: bool, marker: str = "run.json") -> None:
    """Create ``out`` for a new run (see :func:`check_new_dir`); with ``force`` clear
    abgate's entries (the lock file stays: it may be held by this process)."""
    check_new_dir(out, force, marker)
    if out.exists():
        for entry in _contents(out):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".abgate-write-test"
        os.close(open_fd(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to output directory {out}: {exc.strerror}") from None


@contextmanager
def claimed(out: Path, *, resume: bool, force: bool, marker: str) -> Iterator[None]:
    """Hold ``out``'s writer lock for the block, after checking (writing nothing) that
    it may be written: a resume needs its ``marker``; a new run an empty directory or,
    with ``force``, one of abgate's own. The caller clears it with
    :func:`prepare_new_dir` under the lock."""
    if resume:
        if not (out / marker).is_file():
            raise UsageError(f"--resume {out}: no {marker} there; nothing to resume")
        refuse_links(out)  # a resume appends to and replaces what is there
    else:
        check_new_dir(out, force, marker)
    with exclusive(out):
        yield
