"""Identity: canonical JSON and its digests, file SHA-256 (cached by path and stat
signature), sampled hashes, and the identity of a model (a file, a directory of weights or
a hub id).

Everything abgate records about an artefact's identity goes through this module so
that the same bytes always give the same hex string, on every machine, and so that a
file is read once however many records and processes mention it (until it changes).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from abgate.digest_store import DigestStore
from abgate.errors import AbgateError
from abgate.records.sections import ModelRef

CHUNK_BYTES = 1 << 20
SAMPLE_CHUNKS = 64
SAMPLE_CHUNK_BYTES = 1 << 20


def canonical_json(obj: Any) -> bytes:
    """UTF-8 JSON with sorted keys and no whitespace: the form every digest is taken over."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return text.encode("utf-8")


def json_sha256(obj: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``obj`` (spec digests)."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def digest_json(obj: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``obj``."""
    return "sha256:" + hashlib.sha256(canonical_json(obj)).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a whole file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK_BYTES):
            h.update(block)
    return h.hexdigest()


def sampled_sha256(path: Path, chunks: int = SAMPLE_CHUNKS,
                   chunk_bytes: int = SAMPLE_CHUNK_BYTES) -> str:
    """Hex SHA-256 over the file size and ``chunks`` evenly spaced slices of the file.

    This is *not* a content hash: two files that differ only between the sampled
    slices hash the same. It is recorded under its own key (``sampled_sha256``) so
    nobody mistakes it for one. A file no larger than the sample is hashed whole
    (still under the sampled label, so the two modes never mix).
    """
    size = path.stat().st_size
    h = hashlib.sha256()
    h.update(size.to_bytes(8, "big"))
    with open(path, "rb") as fh:
        if size <= chunks * chunk_bytes:
            while block := fh.read(CHUNK_BYTES):
                h.update(block)
            return h.hexdigest()
        last = size - chunk_bytes
        for i in range(chunks):
            fh.seek(i * last // (chunks - 1))
            h.update(fh.read(chunk_bytes))
    return h.hexdigest()


class StatSig(NamedTuple):
    """What ``stat`` says about a file, enough to tell that its bytes may have changed:
    a write (or ``touch -d``, resetting the mtime) sets ``ctime_ns`` to now, which no
    user can set back; a file renamed over it has another ``ino``."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int


def stat_signature(path: Path | str) -> StatSig:
    st = os.stat(path)
    return StatSig(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


@dataclass(frozen=True)
class FileHash:
    """What one hashing pass learned about a file: its SHA-256, size, the real path
    read and its stat signature (the same before and after the read)."""

    sha256: str
    size: int
    real: str = ""
    signature: StatSig | None = None


HASH_TRIES = 3


class HashCache:
    """SHA-256 of files, remembered by real path and stat signature (size, mtime,
    ctime, inode, device) so repeat calls are cheap; with a ``store``
    (:mod:`abgate.digest_store`), across processes too.

    A file rewritten in place gets a new ctime (even when its size and mtime are put
    back), a file renamed over it a new inode: either is hashed again. A file whose
    signature changes while it is read is read again (an error after three tries).
    """

    def __init__(self, store: DigestStore | None = None) -> None:
        self._known: dict[tuple[str, StatSig], str] = {}
        self._store = store
        self.misses = 0  # files read (not found here or in the store)

    def hash(self, path: Path) -> FileHash:
        real = os.path.realpath(path)
        sig = stat_signature(real)
        for _ in range(HASH_TRIES):
            digest = self._known.get((real, sig))
            if digest is None and self._store is not None:
                digest = self._store.get(real, sig)
                if digest is not None:
                    self._known[(real, sig)] = digest
            if digest is not None:
                return FileHash(sha256=digest, size=sig.size, real=real, signature=sig)
            self.misses += 1
            digest = sha256_file(Path(real))
            after = stat_signature(real)
            if after == sig:
                self._known[(real, sig)] = digest
                if self._store is not None:
                    self._store.put(real, sig, digest)
                return FileHash(sha256=digest, size=sig.size, real=real, signature=sig)
            sig = after
        raise AbgateError(f"{path}: the file changed while it was hashed, {HASH_TRIES} "
                          "times; nothing can name its bytes")

    def clear(self) -> None:
        self._known.clear()


#: Process-wide cache used when a caller does not bring its own, backed by the
#: machine's digest store (``ABGATE_DIGEST_CACHE=off``: none).
DEFAULT_CACHE = HashCache(DigestStore.default())


def model_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*")
                  if p.is_file() and ".git" not in p.relative_to(path).parts)


def model_identity(model: str, cache: HashCache = DEFAULT_CACHE) -> ModelRef:
    """What identifies a model in a spec: a file's SHA-256 and size; for a directory
    (an HF checkout, a hub snapshot) every file's, and one digest over them all, so a
    changed weight file changes the spec digest; anything else (a hub id a server
    resolves) is recorded by name only, and says so."""
    return identify_model(model, cache)[0]


def identify_model(model: str, cache: HashCache = DEFAULT_CACHE
                   ) -> tuple[ModelRef, dict[str, FileHash]]:
    """:func:`model_identity`, and what each file's hashing saw (by its path in the
    directory; ``""`` for a model that is one file; none for a name), so a later load
    can tell whether the files are still those bytes (:mod:`abgate.model_check`)."""
    path = Path(model) if model else None
    if path is not None and path.is_file():
        hashed = cache.hash(path)
        return ModelRef(path=model, kind="file", sha256=hashed.sha256,
                        size=hashed.size), {"": hashed}
    if path is not None and path.is_dir():
        seen = {file.relative_to(path).as_posix(): cache.hash(file)
                for file in model_files(path)}
        files = [{"path": rel, "size": h.size, "sha256": h.sha256} for rel, h in seen.items()]
        return ModelRef(path=model, kind="directory", sha256=json_sha256(files),
                        size=sum(h.size for h in seen.values()), files=files), seen
    return ModelRef(path=model, kind="name", sha256=None,
                    note="not a local file or directory: identified by name only"), {}
