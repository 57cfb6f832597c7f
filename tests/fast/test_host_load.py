"""Host load measured at the start and end of each arm or block, and a verdict that
calls the host busy only when that measurement says so."""

from __future__ import annotations

import json
import os
from pathlib import Path

from abgate.compare import compare_samples, decide, load_policy
from abgate.records.load_snapshots import CpuTicks, GpuProcess, HostSnapshot
from tests.support.compare import make_arm
from tests.support.fake import cli, experiment


def _spread_comparison(**load: object) -> str:
    a = make_arm(60, accuracy=0.5, noise=0.02, rng_seed=0)
    b = make_arm(60, accuracy=0.5, noise=0.30, rng_seed=1)
    comparison = compare_samples(a, b)
    if load:
        comparison = comparison.with_extras(host_load=load)
    v = decide(comparison, load_policy(None))
    assert v.decision == "INCONCLUSIVE" and v.explanation is not None
    return v.explanation


def test_a_wide_spread_on_a_quiet_host_is_not_called_busy() -> None:
    line = _spread_comparison(elevated=False, text="load 0.3 on 16 cores, steal 0.0%")
    assert "busy" not in line, line
    assert "single items' speed ratios spread ±" in line
    assert "host load was not elevated (load 0.3 on 16 cores" in line


def test_unmeasured_host_load_is_said_so() -> None:
    line = _spread_comparison()
    assert "busy" not in line and "host load was not measured" in line, line


def test_snapshots_and_their_summary() -> None:
    import abgate.host_load

    start, end = abgate.host_load.snapshot("start"), abgate.host_load.snapshot("end")
    assert start.label == "start" and start.cpus == os.cpu_count()
    assert isinstance(start.busy_processes, list)
    assert all(b.pid != os.getpid() for b in start.busy_processes)
    found = abgate.host_load.summarize([start, end])
    assert found is not None and found.snapshots == 2 and isinstance(found.text, str)
    quiet = HostSnapshot(load_1min=0.3, cpus=16, cpu_ticks=CpuTicks(total=1000, steal=0),
                         gpu_processes=[], busy_processes=[])
    later = quiet.model_copy(update={"cpu_ticks": CpuTicks(total=2000, steal=10)})
    q = abgate.host_load.summarize([quiet, later])
    assert q is not None and not q.elevated
    assert q.text == "load 0.3 on 16 cores, steal 1.0%, 0 other GPU process(es)"
    busy = abgate.host_load.summarize([
        quiet.model_copy(update={"load_1min": 20.0}),
        later.model_copy(update={"cpu_ticks": CpuTicks(total=2000, steal=200),
                                 "gpu_processes": [GpuProcess(gpu=0, pid=99)]})])
    assert busy is not None and busy.elevated
    assert busy.reasons == ["load 20.0 above 16 cores", "CPU steal 20%",
                            "1 other GPU process(es) (pid 99)"]
    assert abgate.host_load.summarize([]) is None


def test_an_ab_records_host_load_per_arm_block_and_in_the_comparison(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "tpot_ms = 4.0", limit=4)
    exp.write_text(exp.read_text().replace('mode = "auto"', 'mode = "blocks"\nblock_size = 2'))
    out = tmp_path / "ab"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr + r.stdout
    snaps = json.loads((out / "ab.json").read_text())["host_load"]["snapshots"]
    labels = [s["label"] for s in snaps]
    assert labels.count("a block start") == labels.count("a block end") == 2, labels
    assert labels.count("b block start") == 2
    assert all("load_1min" in s and "cpu_ticks" in s for s in snaps)
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["comparisons"]["b"]["comparison"]["host_load"]["snapshots"] == len(snaps)
