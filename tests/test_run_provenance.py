"""Contracts, manifests and library mappings around a run: workflow logic, on the fake
engine through the CLI in this process (the library a contract requires is numpy's
extension, mapped by this process as llama.cpp's libllama.so is by a llama.cpp run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy._core._multiarray_umath as numpy_ext

from tests.conftest import engine_refused
from tests.support.fake import cli

LIB = Path(numpy_ext.__file__)
BASE = ["run", "--engine", "fake", "--suite", "synthetic", "--limit", "1", "--max-tokens", "8"]
RUN = BASE
LLAMACPP = ["run", "--suite", "synthetic", "--limit", "1", "--max-tokens", "8"]  # refused


def contract(tmp_path: Path, text: str) -> str:
    p = tmp_path / "contract.toml"
    p.write_text(text)
    return str(p)


def test_request_violation_fails_before_load(tmp_path: Path) -> None:
    c = contract(tmp_path, '[engine_args]\nforbidden = ["flash_attn"]\n'
                           '[env]\nforbidden = ["ABGATE_TEST_FORBIDDEN"]\n')
    with engine_refused() as imported:  # the CLI in this process
        r = cli(*LLAMACPP, "--engine-arg", "flash_attn=true", "--contract", c, "-o",
                str(tmp_path / "R"), env={"ABGATE_TEST_FORBIDDEN": "1"})
    assert r.returncode == 2  # refused input, nothing written (README's exit codes)
    assert "flash_attn" in r.stderr and "ABGATE_TEST_FORBIDDEN" in r.stderr
    assert not (tmp_path / "R").exists() and not imported


def test_effective_violation_is_recorded_and_fails(tmp_path: Path) -> None:
    c = contract(tmp_path, "[settings]\nn_ctx = 2048\nseed = 0\nmargin = 1.0\n")
    out = tmp_path / "R"
    # the settings are left to the engine here (a requested value would be refused before
    # the load): the point is a setting decided at load time (the fake's defaults)
    r = cli(*BASE, "--contract", c, "-o", str(out))
    assert r.returncode == 1 and "n_ctx" in r.stderr and "margin" in r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed"
    recorded = run["provenance"]["contract"]
    assert recorded["passed"] is False and {"request", "effective"} <= set(recorded["checked"])
    clauses = {v["clause"] for v in recorded["violations"]}
    assert any("n_ctx" in c for c in clauses) and any("margin" in c for c in clauses)
    assert not any("seed" in c for c in clauses)


def test_contract_that_holds_and_mapped_libraries(tmp_path: Path) -> None:
    c = contract(tmp_path, f'engine = "fake"\n[settings]\nn_ctx = 1024\nseed = 0\n'
                           f'margin = 8.0\n[libraries]\nrequired = ["{LIB}"]\n')
    out = tmp_path / "R"
    r = cli(*RUN, "--engine-arg", "n_ctx=1024", "--contract", c, "-o", str(out))
    assert r.returncode == 0, r.stderr
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert prov["contract"]["passed"] is True
    assert set(prov["contract"]["checked"]) == {"request", "effective", "libraries"}
    libs = {lib["path"]: lib for w in prov["libraries"] for lib in w["libs"]}
    assert str(LIB.resolve()) in libs and len(libs[str(LIB.resolve())]["sha256"]) == 64
    assert prov["environment"]["python"]


def test_required_library_copy_not_mapped_fails(tmp_path: Path) -> None:
    copy = tmp_path / "build" / LIB.name
    copy.parent.mkdir()
    shutil.copy(LIB, copy)
    with copy.open("ab") as f:  # a freshly built library would differ from the wheel's
        f.write(b"\0rebuilt")
    c = contract(tmp_path, f'[libraries]\nrequired = ["{copy}"]\n')
    r = cli(*RUN, "--contract", c, "-o", str(tmp_path / "R"))
    assert r.returncode == 1
    assert LIB.name in r.stderr and "pid" in r.stderr


def test_manifest_digest_is_embedded(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.c").write_text("int main(){}\n")
    man = tmp_path / "manifest.json"
    r = cli("manifest", "build", "--root", str(src), "-o", str(man))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "R"
    assert cli(*RUN, "--manifest", str(man), "-o", str(out)).returncode == 0
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert prov["manifest"]["digest"] == json.loads(man.read_text())["digest"]
