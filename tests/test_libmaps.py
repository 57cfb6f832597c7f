"""Worker library mappings, read from real child processes."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from abgate.identity import HashCache, sha256_file
from abgate.provenance.libmaps import (
    MappedLib,
    RequiredLib,
    WorkerMapping,
    check_required,
    parse_maps,
    required_from_paths,
    snapshot_pids,
    snapshot_tree,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")

_CHILD = ("import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); "
          "print('ready', flush=True); time.sleep(30)")


def _extension_so() -> Path:
    """A small shared object the interpreter does not load by itself."""
    for name in ("_statistics", "_bisect", "_heapq", "_json"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".so"):
            return Path(spec.origin)
    pytest.skip("no standalone extension .so available")


@pytest.fixture
def libs(tmp_path: Path) -> dict[str, Path]:
    """The same library as a 'fresh build' and as a stale copy elsewhere."""
    src = _extension_so()
    (tmp_path / "build").mkdir()
    (tmp_path / "stale").mkdir()
    fresh = tmp_path / "build" / "libabgatetest.so"
    stale = tmp_path / "stale" / "libabgatetest.so"
    shutil.copyfile(src, fresh)
    shutil.copyfile(src, stale)
    return {"fresh": fresh, "stale": stale}


@pytest.fixture
def spawn() -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start children that map a library and wait; always killed afterwards."""
    procs: list[subprocess.Popen[str]] = []

    def start(lib: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(lib)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def test_parse_maps_keeps_shared_objects_once() -> None:
    text = "\n".join([
        "7f00-7f10 r--p 00000000 08:01 11 /usr/lib/libc.so.6",
        "7f10-7f20 r-xp 00001000 08:01 11 /usr/lib/libc.so.6",
        "7f20-7f30 r--p 00000000 08:01 12 /opt/x/_mod.cpython-311-x86_64-linux-gnu.so",
        "7f30-7f40 r--p 00000000 08:01 13 /opt/build/libnew.so (deleted)",
        "7f40-7f50 r--p 00000000 08:01 14 /usr/lib/locale/locale-archive",
        "7f50-7f60 rw-p 00000000 00:00 0 [heap]",
        "7f60-7f70 rw-p 00000000 00:00 0",
        "7f70-7f80 r--p 00000000 08:01 15 /data/notes.sorted",
    ])
    assert parse_maps(text) == [
        ("/usr/lib/libc.so.6", False),
        ("/opt/x/_mod.cpython-311-x86_64-linux-gnu.so", False),
        ("/opt/build/libnew.so", True),
    ]


def test_snapshot_records_mapped_libs_of_real_children(libs: dict[str, Path],
                                                       spawn: Callable[..., subprocess.Popen[str]]
                                                       ) -> None:
    child = spawn(libs["fresh"])
    tree = snapshot_tree(os.getpid())
    assert tree[0].pid == os.getpid()
    worker = next(w for w in tree if w.pid == child.pid)
    mapped = {m.path: m for m in worker.libs}
    assert str(libs["fresh"]) in mapped
    assert mapped[str(libs["fresh"])].sha256 == sha256_file(libs["fresh"])
    assert len(mapped) == len(worker.libs)  # deduplicated
    assert any(os.path.basename(p).startswith("libc") for p in mapped)
    assert worker.record(worker.cmdline).libs


def test_required_lib_mapped_everywhere_passes(libs: dict[str, Path],
                                               spawn: Callable[..., subprocess.Popen[str]]
                                               ) -> None:
    a, b = spawn(libs["fresh"]), spawn(libs["fresh"])
    required = required_from_paths([libs["fresh"]])
    assert check_required(required, snapshot_pids([a.pid, b.pid])) == []


def test_worker_with_other_copy_fails_naming_it(libs: dict[str, Path],
                                               spawn: Callable[..., subprocess.Popen[str]]
                                               ) -> None:
    good, bad = spawn(libs["fresh"]), spawn(libs["stale"])
    issues = check_required(required_from_paths([libs["fresh"]]),
                            snapshot_pids([good.pid, bad.pid]))
    assert len(issues) == 1
    msg = issues[0].message()
    assert f"pid {bad.pid} (" in msg
    assert str(libs["stale"]) in msg and str(libs["fresh"]) in msg


def test_every_vs_consistent_mode(libs: dict[str, Path],
                                  spawn: Callable[..., subprocess.Popen[str]]) -> None:
    _extension_so()
    loader = spawn(libs["fresh"])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        maps = snapshot_pids([loader.pid, bystander.pid])
        required = required_from_paths([libs["fresh"]])
        every = check_required(required, maps, "every")
        assert [i.worker for i in every] == [f"pid {bystander.pid} ({maps[1].name})"]
        assert "did not map libabgatetest.so" in every[0].message()
        assert check_required(required, maps, "consistent") == []
        assert check_required(required, [maps[1]], "consistent")[0].worker == "no process"
    finally:
        bystander.kill()
        bystander.wait(timeout=10)


def test_same_path_different_hash_fails() -> None:
    req = RequiredLib("/opt/build/libx.so", "a" * 64)
    worker = WorkerMapping(7, "engine", ("engine",),
                           (MappedLib("/opt/build/libx.so", "b" * 64, 10),))
    (issue,) = check_required([req], [worker])
    assert "pid 7 (engine)" in issue.message() and "expected sha256 aaaaaaaaaaaa" in issue.message()
    assert check_required([req], []) and check_required([req], [])[0].reason


def test_hash_cache_avoids_rehashing(libs: dict[str, Path],
                                     spawn: Callable[..., subprocess.Popen[str]]) -> None:
    child = spawn(libs["fresh"])
    cache = HashCache()
    snapshot_pids([child.pid], cache)
    first = cache.misses
    assert first > 0
    snapshot_pids([child.pid], cache)
    assert cache.misses == first
    os.utime(libs["fresh"], ns=(1, 1))  # a changed mtime means hash again
    snapshot_pids([child.pid], cache)
    assert cache.misses == first + 1
