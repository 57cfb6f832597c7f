"""The fleet's checks that need no cluster (issue 33): what is refused before anything
runs or is written, with one line naming the bad thing and exit 2 — sequential looks
that need local engines, an endpoint fleet of arms that are not on servers, hosts that
differ undeclared, unknown names in [cluster]."""

from __future__ import annotations

from pathlib import Path

import pytest

from abgate.errors import UsageError
from abgate.fleet.cluster import cluster_spec
from abgate.fleet.matching import arm_order, check_matched
from abgate.records.fleet import ReplicaFacts
from tests.support.fake import cli, experiment


def _one_line_usage(code: int | str | None, err: str, *needles: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_sequential_with_agreement_on_a_cluster_is_refused_before_writing(
        tmp_path: Path) -> None:
    path = experiment(tmp_path / "s.toml", "perturb = 0.05", limit=10, agreement=True)
    path.write_text(path.read_text().replace("warmup = 1",
                                             'warmup = 1\nstopping = "sequential"'))
    r = cli("ab", str(path), "--cluster", "local:2", "-o", str(tmp_path / "out"))
    _one_line_usage(r.returncode, r.stderr, "sequential", "agreement = false")
    assert not (tmp_path / "out").exists()


def test_endpoints_need_openai_arms(tmp_path: Path) -> None:
    path = experiment(tmp_path / "e.toml", limit=4, agreement=False)
    r = cli("ab", str(path), "--endpoint", "http://127.0.0.1:9", "-o", str(tmp_path / "o"))
    _one_line_usage(r.returncode, r.stderr, "--endpoint", "arm 'a'", "openai")
    assert not (tmp_path / "o").exists()


def test_hosts_that_differ_are_refused_unless_declared() -> None:
    facts = [ReplicaFacts(cpu_model="X", engines={"a": 1}, libraries={"libllama.so": "1"}),
             ReplicaFacts(cpu_model="Y", engines={"a": 1}, libraries={"libllama.so": "2"})]
    with pytest.raises(UsageError, match="differ in cpu_model, libraries"):
        check_matched(facts, ())
    with pytest.raises(UsageError, match="differ in libraries"):
        check_matched(facts, ("cpu_model",))
    assert check_matched(facts, ("cpu_model", "libraries")) == ["cpu_model", "libraries"]
    assert check_matched([facts[0], facts[0].model_copy()], ()) == []


def test_cluster_table_names_are_checked() -> None:
    with pytest.raises(UsageError, match="allow_host_differences: unknown"):
        cluster_spec("local", {"allow_host_differences": ["cpu"]})
    with pytest.raises(UsageError, match="--cluster 'nowhere'"):
        cluster_spec("nowhere", None)
    assert cluster_spec("local:3", None).replicas == 3


def test_arm_order_is_drawn_per_item_and_reproducible() -> None:
    orders = {tuple(arm_order(["a", "b"], f"item-{i}", 0)) for i in range(40)}
    assert orders == {("a", "b"), ("b", "a")}
    assert arm_order(["a", "b"], "item-1", 0) == arm_order(["a", "b"], "item-1", 0)
