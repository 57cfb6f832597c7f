"""Contracts, manifests and library mappings around a real llama.cpp run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import llama_cpp
import pytest

from tests.conftest import abgate, engine_refused, engine_threads, thread_flags
from tests.support.fake import cli

LIB = Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
BASE = ["run", "--suite", "synthetic", "--limit", "1", "--max-tokens", "8"]
RUN = [*BASE, *thread_flags()]


def contract(tmp_path: Path, text: str) -> str:
    p = tmp_path / "contract.toml"
    p.write_text(text)
    return str(p)


def test_request_violation_fails_before_load(tmp_path: Path) -> None:
    c = contract(tmp_path, '[engine_args]\nforbidden = ["flash_attn"]\n'
                           '[env]\nforbidden = ["ABGATE_TEST_FORBIDDEN"]\n')
    with engine_refused() as imported:  # the CLI in this process
        r = cli(*RUN, "--engine-arg", "flash_attn=true", "--contract", c, "-o",
                str(tmp_path / "R"), env={"ABGATE_TEST_FORBIDDEN": "1"})
    assert r.returncode == 2  # refused input, nothing written (README's exit codes)
    assert "flash_attn" in r.stderr and "ABGATE_TEST_FORBIDDEN" in r.stderr
    assert not (tmp_path / "R").exists() and not imported


@pytest.mark.engine
def test_effective_violation_is_recorded_and_fails(tmp_path: Path) -> None:
    c = contract(tmp_path, "[settings]\nn_ctx = 2048\ntype_k = \"f16\"\nn_threads = 999\n")
    out = tmp_path / "R"
    # n_threads is left to the engine here (a requested value would be refused before the
    # load): the point is a setting decided at load time; only n_threads_batch is pinned
    batch_only = [flag for key, value in engine_threads().items() if key != "n_threads"
                  for flag in ("--engine-arg", f"{key}={value}")]
    r = abgate(*BASE, *batch_only, "--contract", c, "-o", str(out))
    assert r.returncode == 1 and "n_ctx" in r.stderr and "n_threads" in r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed"
    recorded = run["provenance"]["contract"]
    assert recorded["passed"] is False and {"request", "effective"} <= set(recorded["checked"])
    clauses = {v["clause"] for v in recorded["violations"]}
    assert any("n_ctx" in c for c in clauses) and any("n_threads" in c for c in clauses)
    assert not any("type_k" in c for c in clauses)


@pytest.mark.engine
def test_contract_that_holds_and_mapped_libraries(tmp_path: Path) -> None:
    c = contract(tmp_path, f'engine = "llamacpp"\n[settings]\nn_ctx = 1024\ntype_k = "f16"\n'
                           f'flash_attn = false\n[libraries]\nrequired = ["{LIB}"]\n')
    out = tmp_path / "R"
    r = abgate(*RUN, "--engine-arg", "n_ctx=1024", "--contract", c, "-o", str(out))
    assert r.returncode == 0, r.stderr
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert prov["contract"]["passed"] is True
    assert set(prov["contract"]["checked"]) == {"request", "effective", "libraries"}
    libs = {lib["path"]: lib for w in prov["libraries"] for lib in w["libs"]}
    assert str(LIB.resolve()) in libs and len(libs[str(LIB.resolve())]["sha256"]) == 64
    assert prov["environment"]["python"]


@pytest.mark.engine
def test_required_library_copy_not_mapped_fails(tmp_path: Path) -> None:
    copy = tmp_path / "build" / "libllama.so"
    copy.parent.mkdir()
    shutil.copy(LIB, copy)
    with copy.open("ab") as f:  # a freshly built library would differ from the wheel's
        f.write(b"\0rebuilt")
    c = contract(tmp_path, f'[libraries]\nrequired = ["{copy}"]\n')
    r = abgate(*RUN, "--contract", c, "-o", str(tmp_path / "R"))
    assert r.returncode == 1
    assert "libllama.so" in r.stderr and "pid" in r.stderr


@pytest.mark.engine
def test_manifest_digest_is_embedded(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.c").write_text("int main(){}\n")
    man = tmp_path / "manifest.json"
    r = abgate("manifest", "build", "--root", str(src), "-o", str(man))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "R"
    assert abgate(*RUN, "--manifest", str(man), "-o", str(out)).returncode == 0
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert prov["manifest"]["digest"] == json.loads(man.read_text())["digest"]
