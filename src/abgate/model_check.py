"""A model checked at every load, not once.

A spec names the model by the SHA-256 of its bytes, taken when the engine is prepared
(:func:`abgate.identity.identify_model`). Every later load of that engine (each block
of an A/B in blocks loads its arm again) checks that the files it opens are still those
bytes, before the engine opens them, once it has (a file swapped during the load) and
when the work on it is done (llama.cpp maps the file: a rewrite in place while it is
loaded changes the weights it runs on): :meth:`ModelStamp.check`.

The check is a ``stat`` of each file against the signature recorded when it was hashed
(size, mtime, ctime, inode, device), and a new SHA-256 of any file whose signature
differs: a write sets the ctime to now (so does ``touch -d``, which puts the mtime
back), and no user can set it back; a file renamed over the model has another inode.
A file touched but not changed hashes the same and is accepted (its new signature
kept). A changed file stops the run, the A/B, the bench or the baseline with
:class:`ModelChanged`, one line naming the file and both hashes: recorded as a failure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from abgate.errors import AbgateError
from abgate.identity import DEFAULT_CACHE, FileHash, HashCache, model_files, stat_signature
from abgate.records.sections import ModelRef


class ModelChanged(AbgateError):
    """A model's bytes are not those its spec names (exit 1: a failure, recorded);
    ``arm``: the A/B arm whose load found it, once named."""

    def __init__(self, message: str, arm: str | None = None) -> None:
        super().__init__(message)
        self.arm = arm


@dataclass
class ModelStamp:
    """A model's identity as prepared, and what hashing its files saw (``files``: by
    path in the directory, ``""`` for a one-file model; empty for a model known by
    name only, which nothing checks)."""

    path: str
    kind: str
    sha256: str | None
    files: dict[str, FileHash] = field(default_factory=dict)

    @classmethod
    def of(cls, identity: ModelRef, files: dict[str, FileHash]) -> ModelStamp:
        return cls(str(identity.path), str(identity.kind), identity.sha256, dict(files))

    def check(self, when: str, cache: HashCache = DEFAULT_CACHE) -> None:
        """Raise :class:`ModelChanged` unless every file is still the bytes hashed
        when the model was identified; ``when`` says where (``before the load``)."""
        if self.kind == "file":
            self._check_file("", Path(self.path), when, cache)
        elif self.kind == "directory":
            root = Path(self.path)
            now = _listing(root, when)
            if set(now) != set(self.files):
                raise ModelChanged(_listing_change(root, set(self.files), set(now), when))
            for rel, file in now.items():
                self._check_file(rel, file, when, cache)

    def _check_file(self, rel: str, file: Path, when: str, cache: HashCache) -> None:
        before = self.files[rel]
        name = f"model directory {self.path}: file {rel}" if rel else f"model {self.path}"
        try:
            real = os.path.realpath(file)
            if real == before.real and stat_signature(real) == before.signature:
                return  # the very file that was hashed, not written since
            now = cache.hash(file)
        except OSError as exc:
            raise ModelChanged(f"{name} is gone {when} ({exc.strerror or exc}); it was "
                               f"sha256 {before.sha256} when identified") from None
        if now.sha256 != before.sha256:
            raise ModelChanged(
                f"{name} changed {when}: sha256 {before.sha256} when it was identified, "
                f"{now.sha256} now ({_what_moved(before, now)}); the records name the "
                "first: put it back, or start again")
        self.files[rel] = now  # touched, not changed: its new signature is the one


def _listing(root: Path, when: str) -> dict[str, Path]:
    try:
        return {file.relative_to(root).as_posix(): file for file in model_files(root)}
    except OSError as exc:
        raise ModelChanged(f"model directory {root} cannot be listed {when} "
                           f"({exc.strerror or exc})") from None


def _listing_change(root: Path, then: set[str], now: set[str], when: str) -> str:
    parts = [f"{what} {', '.join(sorted(names)[:3])}" for what, names in
             (("added", now - then), ("removed", then - now)) if names]
    return (f"model directory {root} changed {when}: files {'; '.join(parts)} since it "
            "was identified; the records name the first: put it back, or start again")


def _what_moved(before: FileHash, now: FileHash) -> str:
    """The stat fields that differ, each then and now (a rename over: the inode)."""
    if before.real != now.real:
        return f"now the file {now.real}, then {before.real}"
    if before.signature is None or now.signature is None:
        return "stat unknown"
    moved = [f"{key} {a} then, {b} now" for key, a, b in
             zip(before.signature._fields, before.signature, now.signature, strict=True)
             if a != b]
    return "; ".join(moved) or "stat the same"
