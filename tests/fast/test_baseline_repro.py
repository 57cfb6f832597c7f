"""A baseline recorded and checked on the same build passes: the record and the check
take the host at the same moment (after the load), and volatile figures (GPU memory in
use, a profiler's KV-cache block counts) are listed apart, not drift, unless
``--strict-volatile`` asks for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy.random  # noqa: F401  (mapped before the record, as in a later process)
import pytest

from abgate.compare import drift as drift_module
from abgate.compare.drift import configuration, drift, parse_allow
from abgate.engines import fake
from abgate.records import facts
from tests.support.fake import cli

GB = 1 << 30
RECORD = ("baseline", "record", "--engine", "fake", "--input-len", "32", "--output-len", "8",
          "--repeats", "2", "--no-probes", "-o")


@pytest.fixture
def gpu_memory_follows_the_engine(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A GPU whose memory in use is 0.6 GB with no engine loaded and 47 GB with one (as
    on the H200 with vLLM), plus a few MB that move from one snapshot to the next."""
    live = [0]
    calls = [0]

    def gpus() -> list[dict[str, Any]]:
        calls[0] += 1
        used = (47 if live[0] else 0.6) * GB + calls[0] * 1_000_000
        return [{"index": 0, "name": "NVIDIA H200", "memory_total": 141 * GB,
                 "memory_used": int(used), "driver": "570.1"}]

    init, close = fake.FakeEngine.__init__, fake.FakeEngine.close

    def counted_init(self: fake.FakeEngine, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        live[0] += 1

    def counted_close(self: fake.FakeEngine) -> None:
        live[0] -= 1
        close(self)

    monkeypatch.setattr("abgate.host.gpus", gpus)
    monkeypatch.setattr(fake.FakeEngine, "__init__", counted_init)
    monkeypatch.setattr(fake.FakeEngine, "close", counted_close)
    return live


def test_record_then_check_on_the_same_build_passes(
        tmp_path: Path, gpu_memory_follows_the_engine: list[int]) -> None:
    base = tmp_path / "bl"
    assert cli(*RECORD, str(base)).returncode == 0
    recorded = json.loads((base / "baseline.json").read_text())
    # the record's host is the loaded one, as the check sees it
    assert recorded["host"]["gpus"][0]["memory_used"] > 40 * GB
    check = cli("baseline", "check", str(base), "--json", str(tmp_path / "check.json"))
    assert check.returncode == 0, check.stdout + check.stderr
    conf = json.loads((tmp_path / "check.json").read_text())["configuration"]
    assert conf["passed"] and conf["unexplained"] == []
    assert [d["key"] for d in conf["volatile"]] == ["host.gpus.0.memory_used"]
    assert "volatile figures differ, not compared" in conf["summary"]
    assert "volatile (not compared): host.gpus.0.memory_used" in check.stdout


def test_strict_volatile_compares_them_and_both_snapshots_are_after_the_load(
        tmp_path: Path, gpu_memory_follows_the_engine: list[int]) -> None:
    base = tmp_path / "bl"
    assert cli(*RECORD, str(base)).returncode == 0
    strict = cli("baseline", "check", str(base), "--strict-volatile", "--json",
                 str(tmp_path / "check.json"))
    assert strict.returncode == 1, strict.stdout
    conf = json.loads((tmp_path / "check.json").read_text())["configuration"]
    assert conf["unexplained"] == ["host.gpus.0.memory_used"] and conf["strict_volatile"]
    diff = conf["differences"][0]
    # both loaded (47 GB), only the few MB between two snapshots apart
    assert abs(diff["recorded"] - diff["current"]) < 10_000_000


def test_kv_blocks_a_profiler_computed_are_volatile_not_drift() -> None:
    doc = {"engine": {"name": "vllm", "effective_config": {"num_gpu_blocks": 119937,
                                                           "num_cpu_blocks": 0,
                                                           "dtype": "bfloat16"}},
           "host": {"gpus": [{"name": "H200", "memory_used": 600}]}}
    now = json.loads(json.dumps(doc))
    now["engine"]["effective_config"]["num_gpu_blocks"] = 120108
    now["host"]["gpus"][0]["memory_used"] = 47_000
    found = drift(configuration(doc), configuration(now))
    assert found.passed and not found.differences
    assert [d.key for d in found.volatile] == ["effective.num_gpu_blocks",
                                                "host.gpus.0.memory_used"]
    strict = drift(configuration(doc), configuration(now), strict_volatile=True)
    assert strict.unexplained == ["effective.num_gpu_blocks", "host.gpus.0.memory_used"]
    # a real change is still drift, and an allowed prefix covers the keys below it
    now["engine"]["effective_config"]["dtype"] = "float16"
    now["host"]["gpus"][0]["name"] = "H100"
    found = drift(configuration(doc), configuration(now), parse_allow("host.gpus"))
    assert found.unexplained == ["effective.dtype"]
    assert [d.key for d in found.differences if d.allowed] == ["host.gpus.0.name"]


def test_volatile_is_one_declared_list() -> None:
    volatile = drift_module.volatile
    assert volatile("host.gpus.3.memory_used") and volatile("effective.num_cpu_blocks")
    assert not volatile("host.gpus.0.name") and not volatile("effective.block_size")
    assert all(p.split(".", 1)[0] in ("host", "effective") for p in facts.VOLATILE)


def test_the_load_time_is_volatile() -> None:
    """Found on the H200 (benchmarks/gpu_determinism.py smollm2): the transformers
    engine's effective config carries ``load_seconds``, and its baseline check on the
    same build failed on it alone (tokens matched 3/3 in both cases)."""
    assert drift_module.volatile("effective.load_seconds")
