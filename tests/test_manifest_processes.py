"""Row 2 of issue 37: a manifest against the running processes.

- At run start every library the manifest lists is hashed again: a git-ignored build
  output rebuilt after the manifest makes it stale (refused, exit 2, nothing written; or
  recorded stale with ``--allow-stale-manifest``): workflow logic on the fake engine.
- After the load, each engine process's mapped libraries are matched against the
  manifest: llama.cpp in-process here, and a launched ``llama_cpp.server`` (its process
  tree maps libllama.so) in tests/test_engine_session.py's launched run; real engines.
- A contract clause requires a library in processes of some roles or ranks and forbids
  other copies: real child processes titled as vLLM titles its workers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from abgate.identity import HashCache
from abgate.provenance.contract import check_libraries
from abgate.provenance.contract_toml import Contract, load_contract
from abgate.provenance.libmaps import snapshot_pids, snapshot_tree
from abgate.provenance.manifest import build_manifest
from abgate.provenance.manifest_libs import match_processes, rehash_libraries
from tests.conftest import abgate
from tests.support.fake import cli
from tests.test_bench_provenance import BENCH, git
from tests.test_engine_session import ONE_THREAD, _libllama

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")


def _repo_with_ignored_build(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "src"
    (repo / "build").mkdir(parents=True)
    (repo / "a.c").write_text("int main(){}\n")
    (repo / ".gitignore").write_text("build/\nmanifest.json\n")
    lib = repo / "build" / "libseed.so"
    lib.write_bytes(b"\x7fELF first build")
    git(repo, "init", "-q")
    git(repo, "add", "a.c", ".gitignore")
    git(repo, "commit", "-qm", "one")
    return repo, lib


def test_a_rebuilt_ignored_library_makes_the_manifest_stale(tmp_path: Path) -> None:
    repo, lib = _repo_with_ignored_build(tmp_path)
    man = repo / "manifest.json"
    r = cli("manifest", "build", "--root", str(repo), "--lib", "build/*.so", "-o", str(man))
    assert r.returncode == 0, r.stderr
    fresh = tmp_path / "fresh"
    r = cli(*BENCH, "--manifest", str(man), "-o", str(fresh), cwd=repo)
    assert r.returncode == 0, r.stderr
    rec = json.loads((fresh / "run.json").read_text())["provenance"]["manifest"]
    assert rec["stale"] is False and rec["freshness"]["libraries_rehashed"] == 1
    lib.write_bytes(b"\x7fELF rebuilt")  # git sees nothing: build/ is ignored
    stale = tmp_path / "stale"
    r = cli(*BENCH, "--manifest", str(man), "-o", str(stale), cwd=repo)
    assert r.returncode == 2 and "library build/libseed.so: sha256" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not stale.exists()
    r = cli(*BENCH, "--manifest", str(man), "--allow-stale-manifest", "-o", str(stale),
            cwd=repo)
    assert r.returncode == 0, r.stderr
    rec = json.loads((stale / "run.json").read_text())["provenance"]["manifest"]
    assert rec["stale"] is True and rec["freshness"]["checked"] is True
    (diff,) = rec["freshness"]["differences"]  # the git tree is the same; the library not
    assert diff.startswith("library build/libseed.so: sha256 ")
    lib.unlink()
    assert rehash_libraries(json.loads(man.read_text()), repo) == [
        "library build/libseed.so: No such file or directory now"]


def test_this_process_matched_a_copy_differed_and_the_rest_unnamed(tmp_path: Path) -> None:
    """A real process (this one) that mapped libllama.so through llama-cpp-python."""
    import llama_cpp  # noqa: F401  (maps libllama.so into this process)

    lib = _libllama()
    copy = tmp_path / "build" / lib.name
    copy.parent.mkdir()
    shutil.copyfile(lib, copy)
    here = snapshot_tree(cache=HashCache())[:1]
    for listed, state in ((str(lib), "matched"), (str(copy), "differed")):
        manifest = build_manifest(tmp_path, _libs(listed))
        (match,) = match_processes(manifest, tmp_path, here)
        assert match.pid == os.getpid() and match.unnamed
        if state == "matched":
            assert match.matched == [str(lib)] and not match.differed and not match.not_mapped
        else:
            (bad,) = match.differed
            assert not match.matched and "another copy" in bad.why
            assert bad.manifest_path == os.path.realpath(copy)


def _libs(*paths: str) -> object:
    from abgate.provenance.manifest import BuildOptions

    return BuildOptions(libs=tuple(paths))


@pytest.mark.engine
def test_llamacpp_run_records_its_process_against_the_manifest(tmp_path: Path,
                                                                model_path: str) -> None:
    lib = _libllama()
    man = tmp_path / "manifest.json"
    r = cli("manifest", "build", "--root", str(tmp_path), "--lib", str(lib), "-o", str(man))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "R"
    r = abgate("run", "--suite", "synthetic", "--difficulty", "trivial", "--limit", "1",
               "--max-tokens", "4", "--engine", "llamacpp", "--model", model_path,
               *ONE_THREAD, "--manifest", str(man), "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "run.json").read_text())["provenance"]["manifest"]
    (proc,) = rec["processes"]
    assert proc["matched"] == [str(lib)] and proc["differed"] == [] and proc["unnamed"]
    assert rec["stale"] is False and rec["freshness"]["libraries_rehashed"] == 1


# A launched llama_cpp.server's tree matched against the manifest: in
# tests/test_engine_session.py's run against a launched server (one launch for the
# contract and the manifest).


_CHILD = ("import ctypes, sys, time; sys.argv[1] and ctypes.CDLL(sys.argv[1]); "
          "print('ready', flush=True); time.sleep(30)")


@pytest.fixture
def titled() -> Iterator[Callable[[str, Path | None], int]]:
    """Children titled as vLLM titles its processes (``exec -a``), each mapping a library
    or none; killed afterwards."""
    procs: list[subprocess.Popen[str]] = []

    def start(title: str, lib: Path | None) -> int:
        cmd = f'exec -a "{title}" "{sys.executable}" -c "$0" "$1"'
        proc = subprocess.Popen(["bash", "-c", cmd, _CHILD, str(lib or "")],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def _ext_so(tmp_path: Path) -> tuple[Path, Path]:
    from tests.test_libmaps import _extension_so

    good, other = tmp_path / "build" / "libseed.so", tmp_path / "old" / "libseed.so"
    for p in (good, other):
        p.parent.mkdir()
        shutil.copyfile(_extension_so(), p)
    return good, other


def _contract(tmp_path: Path, lib: Path, where: str) -> Contract:
    path = tmp_path / "c.toml"
    path.write_text(f'[libraries]\nrequired = ["{lib}"]\n{where}\n')
    return load_contract(path)


def test_contract_requires_a_library_in_every_tp_worker_and_no_other_copy(
        tmp_path: Path, titled: Callable[[str, Path | None], int]) -> None:
    good, other = _ext_so(tmp_path)
    tp0, tp1 = titled("VLLM::Worker_TP0", good), titled("VLLM::Worker_TP1", None)
    core = titled("VLLM::EngineCore", None)  # not a TP worker: need not map it
    every_tp = _contract(tmp_path, good, 'ranks = ["TP*"]')
    found = check_libraries(every_tp, snapshot_pids([tp0, tp1, core]), tmp_path)
    assert [v.message() for v in found] == [found[0].message()] and "rank TP1" in \
        found[0].message() and "did not map libseed.so" in found[0].message()
    assert not check_libraries(every_tp, snapshot_pids([tp0, core]), tmp_path)
    stray = titled("python-helper", other)  # another copy, in a process not selected
    (bad,) = check_libraries(every_tp, snapshot_pids([tp0, core, stray]), tmp_path)
    assert f"mapped {other} instead of {good}" in bad.message()
    by_role = _contract(tmp_path, good, 'roles = ["engine_core"]')
    (none,) = check_libraries(by_role, snapshot_pids([tp0]), tmp_path)
    assert "no process of role engine_core was found" in none.message()
    (core_missing,) = check_libraries(by_role, snapshot_pids([tp0, core]), tmp_path)
    assert "did not map" in core_missing.message() and str(core) in core_missing.message()
    assert by_role.to_dict()["libraries"]["roles"] == ["engine_core"]
