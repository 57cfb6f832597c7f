"""Run contracts: TOML loading, request/effective/library checks, violation reporting."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from abgate.errors import AbgateError, UsageError
from abgate.provenance.contract import (
    ContractOutcome,
    ContractViolation,
    check_effective,
    check_libraries,
    check_request,
    load_contract,
    values_equal,
)
from abgate.provenance.libmaps import snapshot_pids

EXAMPLE = """\
name = "llama-f16-ctx2048"
engine = "llama-cpp"

[settings]
n_ctx = 2048
n_threads = 2
type_k = "f16"
flash_attn = false

[engine_args]
required = { seed = 0 }
forbidden = ["rope_freq_base"]

[env]
required = { OMP_NUM_THREADS = "2" }
forbidden = ["LD_PRELOAD", "HF_TOKEN"]

[libraries]
required = ["build/*.so"]
mode = "every"
"""

EFFECTIVE: dict[str, Any] = {
    "n_ctx": 2048, "n_threads": 2, "n_batch": 512, "flash_attn": False, "type_k": "f16",
    "type_v": "f16", "n_gpu_layers": 0, "seed": 0, "use_mmap": True,
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contract.toml"
    path.write_text(text)
    return path


@pytest.fixture
def contract_path(tmp_path: Path) -> Path:
    return write(tmp_path, EXAMPLE)


def test_contract_that_holds(contract_path: Path) -> None:
    contract = load_contract(contract_path)
    assert contract.settings["n_ctx"] == 2048 and contract.engine == "llama-cpp"
    args = {"n_ctx": 2048, "seed": 0}
    outcome = ContractOutcome(contract)
    outcome.record("request", check_request(contract, "llama-cpp", args,
                                            {"OMP_NUM_THREADS": "2", "PATH": "/bin"}))
    outcome.record("effective", check_effective(contract, "llama-cpp", EFFECTIVE))
    outcome.raise_if_violated()
    record = outcome.recorded(str(contract_path))
    assert record.passed is True and record.checked == ["request", "effective"]
    assert record.contract is not None and (record.contract.model_extra or {})["sha256"]
    assert json.dumps(record.to_dict())


def test_request_violations_fail_fast(contract_path: Path) -> None:
    contract = load_contract(contract_path)
    violations = check_request(contract, "llama-cpp",
                               {"n_ctx": 4096, "rope_freq_base": 10000.0},
                               {"OMP_NUM_THREADS": "4", "HF_TOKEN": "hf_secret"})
    clauses = {v.clause: v for v in violations}
    assert set(clauses) == {"settings.n_ctx", "engine_args.required.seed",
                            "engine_args.forbidden.rope_freq_base", "env.required.OMP_NUM_THREADS",
                            "env.forbidden.HF_TOKEN"}
    assert all(v.stage == "request" for v in violations)
    assert clauses["settings.n_ctx"].actual == 4096
    err = ContractViolation(violations, contract)
    assert isinstance(err, AbgateError) and err.violations == violations
    text = str(err)
    assert "5 clauses" in text and "settings.n_ctx: expected 2048, got 4096" in text
    assert "hf_secret" not in text and "hf_secret" not in json.dumps(
        [v.finding().to_dict() for v in violations])


def test_request_checks_only_what_request_shows(contract_path: Path) -> None:
    contract = load_contract(contract_path)
    # n_threads, type_k, flash_attn not requested: nothing to say before load
    assert check_request(contract, "llama-cpp", {"seed": 0}, {"OMP_NUM_THREADS": "2"}) == []
    wrong_engine = check_request(contract, "vllm", {"seed": 0}, {"OMP_NUM_THREADS": "2"})
    assert [v.clause for v in wrong_engine] == ["engine"]


def test_effective_violations_after_load(contract_path: Path) -> None:
    contract = load_contract(contract_path)
    effective = {**EFFECTIVE, "n_ctx": 4096, "type_k": "q8_0"}
    del effective["flash_attn"]
    violations = check_effective(contract, "llama-cpp", effective)
    by_clause = {v.clause: v for v in violations}
    assert set(by_clause) == {"settings.n_ctx", "settings.type_k", "settings.flash_attn"}
    assert all(v.stage == "effective" for v in violations)
    assert "not reported by this engine" in by_clause["settings.flash_attn"].message()
    assert "does not report this key" in by_clause["settings.flash_attn"].message()
    assert 'expected "f16", got "q8_0"' in by_clause["settings.type_k"].message()
    outcome = ContractOutcome(contract)
    outcome.record("effective", violations)
    with pytest.raises(ContractViolation) as info:
        outcome.raise_if_violated()
    assert len(info.value.violations) == 3
    assert outcome.recorded("c.toml").violations[0].stage == "effective"


def test_values_compare_type_strictly() -> None:
    assert values_equal(2048, 2048.0)
    assert not values_equal(2048, "2048")
    assert not values_equal(True, 1) and not values_equal(0, False)
    assert values_equal([1, "a"], (1, "a")) and not values_equal({"a": 1}, {"a": True})
    assert not values_equal(None, 0) and values_equal(None, None)


def test_effective_type_mismatch_is_named(tmp_path: Path) -> None:
    contract = load_contract(write(tmp_path, "[settings]\nn_ctx = 2048\n"))
    (v,) = check_effective(contract, "x", {"n_ctx": "2048"})
    assert "(int vs string)" in v.message()
    assert check_effective(contract, "x", {"n_ctx": 2048.0}) == []


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("[settings]\nn_ctx = \n", r"contract\.toml:2: invalid TOML"),
        ("name = 'x'\n[setings]\nn_ctx = 1\n",
         r":2: unknown key 'setings' \(did you mean 'settings'"),
        ("[env]\nforbiden = ['A']\n", r":2: unknown key 'env.forbiden' \(did you mean 'forbidden'"),
        ("[env]\nrequired = { OMP_NUM_THREADS = 2 }\n", r"must be a string"),
        ("[engine_args]\nrequired = ['a']\nforbidden = ['a']\n", r"both required and forbidden"),
        ("[libraries]\nmode = 'evry'\n", r"did you mean 'every'"),
        ("settings = 3\n", r"must be a table"),
    ],
)
def test_bad_contract_is_one_line_usage_error(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(UsageError, match=pattern) as info:
        load_contract(write(tmp_path, text))
    assert "\n" not in str(info.value)


def test_missing_contract_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_contract(tmp_path / "nope.toml")


def test_required_presence_lists(tmp_path: Path) -> None:
    contract = load_contract(write(tmp_path, "[engine_args]\nrequired = ['seed']\n"
                                             "[env]\nrequired = ['CUDA_VISIBLE_DEVICES']\n"))
    found = check_request(contract, "e", {}, {})
    assert [v.clause for v in found] == ["engine_args.required.seed",
                                         "env.required.CUDA_VISIBLE_DEVICES"]
    assert check_request(contract, "e", {"seed": 5}, {"CUDA_VISIBLE_DEVICES": "0"}) == []


def _ext_so() -> Path:
    spec = importlib.util.find_spec("_statistics")
    if spec is None or not spec.origin or not spec.origin.endswith(".so"):
        pytest.skip("no extension .so")
    return Path(spec.origin)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_library_clause_on_real_workers(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    (tmp_path / "old").mkdir()
    fresh, stale = tmp_path / "build" / "libct.so", tmp_path / "old" / "libct.so"
    shutil.copyfile(_ext_so(), fresh)
    shutil.copyfile(_ext_so(), stale)
    contract = load_contract(write(tmp_path, '[libraries]\nrequired = ["build/*.so"]\n'))
    code = "import ctypes,sys,time; ctypes.CDLL(sys.argv[1]); print(1, flush=True); time.sleep(30)"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(lib)], stdout=subprocess.PIPE)
             for lib in (fresh, stale)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline()
        maps = snapshot_pids([p.pid for p in procs])
        assert check_libraries(contract, maps[:1], tmp_path) == []
        (v,) = check_libraries(contract, maps, tmp_path)
        assert v.stage == "libraries" and f"pid {procs[1].pid}" in v.message()
        assert str(stale) in v.message()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()
    empty = load_contract(write(tmp_path, '[libraries]\nrequired = ["nothing/*.so"]\n'))
    assert "matches no file" in check_libraries(empty, [], tmp_path)[0].message()
