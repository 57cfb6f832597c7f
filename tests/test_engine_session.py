"""One engine session for run, A/B, bench and baseline (``abgate.runner.session``):
every command prepares, loads, isolates, records and cleans up an engine the same way.
(Per-arm env isolation and SIGTERM during a bench, the session's logic on any engine:
tests/fast/test_session_fake.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from abgate.errors import UsageError
from abgate.provenance.manifest import build_manifest
from abgate.runner.documents import new_record
from abgate.runner.session import EngineSpec, prepare_engine
from abgate.runner.spec import RunConfig, prepare
from tests.conftest import abgate
from tests.support.fake import cli
from tests.test_openai_engine import LAUNCH, needs_server

ONE_THREAD = ["--engine-arg", "n_threads=1", "--engine-arg", "n_threads_batch=1"]


def _libllama() -> Path:
    import llama_cpp

    found = sorted(Path(llama_cpp.__file__).parent.glob("lib/libllama.so*"))
    assert found, "llama-cpp-python ships libllama.so"
    return found[0]


# -- prepare ------------------------------------------------------------------------------


def test_vllm_options_pass_prepare_and_typos_name_the_option() -> None:
    p = prepare(RunConfig(engine="vllm", model="org/some-model", suite="synthetic", limit=1,
                          engine_options={"concurrency": 8}))
    assert p.spec["engine_options"] == {"concurrency": 8}
    assert p.spec["model"]["kind"] == "name"  # a hub id is identified by name, and says so
    with pytest.raises(UsageError, match="did you mean 'concurrency'"):
        prepare_engine(EngineSpec("vllm", "m", options={"concurency": 8}))
    with pytest.raises(UsageError, match="takes no engine options"):
        prepare_engine(EngineSpec("llamacpp", None, options={"concurrency": 2}))


def test_changed_weight_file_in_a_model_directory_changes_the_spec_digest(
        tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    weights = model / "model.safetensors"
    weights.write_bytes(b"\0" * 64)
    cfg = RunConfig(engine="vllm", model=str(model), suite="synthetic", limit=1)
    first = prepare(cfg)
    assert first.spec["model"]["kind"] == "directory"
    assert {f["path"] for f in first.spec["model"]["files"]} == {"config.json",
                                                                 "model.safetensors"}
    weights.write_bytes(b"\1" + b"\0" * 63)  # same size, new content
    os.utime(weights, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    second = prepare(cfg)
    assert second.spec_digest != first.spec_digest
    assert second.spec["model"]["sha256"] != first.spec["model"]["sha256"]


def test_run_json_and_manifest_agree_on_dirty(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (repo / "untracked.txt").write_text("new\n")  # untracked, not ignored: dirty
    monkeypatch.chdir(repo)
    header = new_record("run", config={}, spec={}, spec_digest="x")
    manifest = build_manifest(repo)
    assert header.git is not None and header.git.dirty is True
    assert header.git.to_dict() == manifest["source"]["git"]


# -- loaded(): env isolation, processes, hashing once ---------------------------------------


# A model hashed once per A/B (its spec, every load's check, the runtime weights diff):
# tests/test_ab_weights_evidence.py, whose llama.cpp A/B of the same two files counts it.


# -- served engines through the same session --------------------------------------------------


@pytest.mark.engine
@needs_server
@pytest.mark.server
@pytest.mark.cost(16)
def test_launched_server_run_bench_and_baseline(tmp_path: Path, model_path: str) -> None:
    """A launched llama_cpp.server through the same session: a run records only its
    process tree (a library contract holds on it, and the tree is matched against a
    manifest); bench, baseline record and check against it (the check's own fresh launch
    the same configuration)."""
    _run_records_only_the_process_tree_contract_and_manifest(tmp_path, model_path)
    _bench_and_baseline_against_a_launched_server(tmp_path, model_path)


def _run_records_only_the_process_tree_contract_and_manifest(tmp_path: Path,
                                                            model_path: str) -> None:
    """One run, a contract and a manifest on it (the manifest's part was
    tests/test_manifest_processes.py's own launch of the same run)."""
    lib = _libllama()
    contract = tmp_path / "contract.toml"
    contract.write_text(f'[libraries]\nrequired = ["{lib}"]\nmode = "every"\n')
    man = tmp_path / "manifest.json"
    assert cli("manifest", "build", "--root", str(tmp_path), "--lib", str(lib), "-o",
               str(man)).returncode == 0
    out = tmp_path / "R"
    r = abgate("run", "--suite", "synthetic", "--difficulty", "trivial", "--limit", "1",
               "--max-tokens", "4", "--engine", "openai", "--model", model_path, "--launch",
               LAUNCH, *ONE_THREAD, "--contract", str(contract), "--manifest", str(man),
               "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "run.json").read_text())
    procs = run["engine_processes"]
    libs = run["provenance"]["libraries"]
    assert procs and {w["pid"] for w in libs} == set(procs)
    assert all("llama_cpp.server" in " ".join(w["cmdline"]) for w in libs)
    assert run["provenance"]["contract"]["passed"] is True
    assert run["cleanup"]["verified"]
    # the launched tree matched against the manifest: the server maps the listed library
    matched = run["provenance"]["manifest"]["processes"]
    assert {p["pid"] for p in matched} == set(run["engine_processes"])
    server = [p for p in matched if p["matched"] == [str(lib)]]
    assert server and all(p["differed"] == [] for p in matched)
    assert os.getpid() not in {p["pid"] for p in matched}


def _bench_and_baseline_against_a_launched_server(tmp_path: Path, model_path: str) -> None:
    served = ["--engine", "openai", "--model", model_path, "--launch", LAUNCH, *ONE_THREAD,
              "--engine-arg", "n_ctx=1024"]
    r = abgate("bench", "--input-len", "64", "--output-len", "8", "--repeats", "2",
               "--warmup", "0", "--peak-bw", "10", *served, "-o", str(tmp_path / "B"))
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "B" / "run.json").read_text())
    assert run["status"] == "complete" and run["engine"]["name"] == "openai"
    assert run["cleanup"]["verified"] and run["engine_processes"]
    summary = json.loads((tmp_path / "B" / "summary.json").read_text())
    assert summary["cases"][0]["speed"]["steady_decode_tps"]["n"] == 2
    assert summary["resources"]["pid"] == run["engine_processes"][0]
    r = abgate("baseline", "record", "--input-len", "64", "--output-len", "8", "--repeats",
               "1", "--warmup", "0", "--no-probes", *served, "-o", str(tmp_path / "BL"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "BL" / "baseline.json").read_text())
    assert doc["engine"]["name"] == "openai" and doc["cleanup"]["verified"]
    report = tmp_path / "check.json"
    r = abgate("baseline", "check", str(tmp_path / "BL"), "--tolerance", "1", "--json",
               str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    # a fresh launch on another port: the same configuration (the port, log and ready
    # time are facts of the launch), and the check's own server stopped and verified
    checked = json.loads(report.read_text())
    conf = checked["configuration"]
    assert conf["passed"] and conf["summary"] == "exact match"
    assert checked["cleanup"]["verified"] and checked["cleanup"]["server"]["survivors"] == []
    assert "effective.server_ready_s" in conf["not_compared"]
