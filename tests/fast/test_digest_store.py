"""Digests kept across processes (abgate/digest_store.py): a second process (here, a
second HashCache on the same store) reads nothing for an unchanged file; a file rewritten
with its size and mtime put back, or replaced by a rename, is read again and gets its new
digest; a damaged, unwritable or symlinked store costs a re-read, never a wrong digest or an error;
``ABGATE_DIGEST_CACHE=off`` keeps no store."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abgate import identity
from abgate.digest_store import DigestStore
from abgate.identity import HashCache


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = identity.sha256_file

    def counted(path: Path) -> str:
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(identity, "sha256_file", counted)
    return seen


def test_an_unchanged_file_is_read_once_a_changed_one_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _reads(monkeypatch)
    store = tmp_path / "cache" / "digests.sqlite3"
    f = tmp_path / "model.gguf"
    f.write_bytes(b"weights v1")
    first = HashCache(DigestStore(store)).hash(f)
    assert first.sha256 == _sha(f) and len(reads) == 1 and store.is_file()
    again = HashCache(DigestStore(store))  # another process: nothing in memory
    assert again.hash(f).sha256 == first.sha256 and len(reads) == 1 and again.misses == 0

    st = f.stat()  # rewritten in place, size and mtime put back: the ctime moved
    f.write_bytes(b"weights v2")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = HashCache(DigestStore(store)).hash(f)
    assert changed.sha256 == _sha(f) != first.sha256 and len(reads) == 2

    other = tmp_path / "other.gguf"  # renamed over it: another inode
    other.write_bytes(b"weights v3")
    os.replace(other, f)
    assert HashCache(DigestStore(store)).hash(f).sha256 == _sha(f) and len(reads) == 3


def test_a_damaged_unwritable_or_linked_store_costs_a_read_not_a_wrong_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _reads(monkeypatch)
    f = tmp_path / "lib.so"
    f.write_bytes(b"\x7fELF")
    damaged = tmp_path / "damaged.sqlite3"
    damaged.write_bytes(b"not a database" * 100)
    target = tmp_path / "elsewhere.sqlite3"
    (tmp_path / "linked.sqlite3").symlink_to(target)
    for store in (DigestStore(damaged), DigestStore(tmp_path / "a-file" / "digests.sqlite3"),
                  DigestStore(tmp_path / "linked.sqlite3")):
        (tmp_path / "a-file").touch()
        for _ in range(2):
            assert HashCache(store).hash(f).sha256 == _sha(f)
    assert len(reads) == 6
    assert damaged.read_bytes() == b"not a database" * 100  # left as it was
    assert not target.exists()  # nothing written through the link


def test_the_default_store_follows_the_cache_and_can_be_turned_off(tmp_path: Path) -> None:
    code = ("from abgate.identity import DEFAULT_CACHE as c; import sys; "
            "c.hash(sys.argv[1]); print(c.misses)")
    f = tmp_path / "data.jsonl"
    f.write_text("{}\n")
    env = {**os.environ, "ABGATE_CACHE": str(tmp_path / "c")}
    env.pop("ABGATE_DIGEST_CACHE", None)

    def misses(**extra: str) -> str:
        out = subprocess.run([sys.executable, "-c", code, str(f)], env={**env, **extra},
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()

    assert [misses(), misses()] == ["1", "0"]
    assert (tmp_path / "c" / "digests.sqlite3").is_file()
    assert misses(ABGATE_DIGEST_CACHE="off") == "1"
    assert misses(ABGATE_CACHE=str(tmp_path / "d"), ABGATE_DIGEST_CACHE="off") == "1"
    assert not (tmp_path / "d").exists()
