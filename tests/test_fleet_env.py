"""A local Ray cluster that abgate starts gets the environment abgate was launched in,
not one a library it imported edited (``abgate.launch_env``): seen on the H200, vLLM's
argument checks import cv2, which prepends its lib64 to ``LD_LIBRARY_PATH``, and the
replicas of a baseline recorded with ``--cluster`` then differed from its check's."""

from __future__ import annotations

import os

import pytest

from abgate.fleet.cluster import ClusterSpec, connected

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.extras]  # a real local Ray cluster (no engine)


def _env(*names: str) -> dict[str, str | None]:
    return {n: os.environ.get(n) for n in names}


def test_a_local_cluster_starts_in_the_launch_environment(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    if ray.is_initialized():  # connected() would use a test's cluster as it is
        pytest.skip("a Ray is already initialised in this process")
    launched = os.environ.get("LD_LIBRARY_PATH")
    edited = "/opt/cv2/lib64" + (":" + launched if launched else "")
    monkeypatch.setenv("LD_LIBRARY_PATH", edited)  # as cv2's import does
    monkeypatch.setenv("ABGATE_TEST_SET_BY_A_LIBRARY", "1")
    with connected(ClusterSpec(address="local:1", replicas=1)) as r:
        seen = r.get(r.remote(num_cpus=0)(_env).remote(
            "LD_LIBRARY_PATH", "ABGATE_TEST_SET_BY_A_LIBRARY"), timeout=120)
        # this process keeps its own environment meanwhile
        assert os.environ["LD_LIBRARY_PATH"] == edited
    assert seen == {"LD_LIBRARY_PATH": launched, "ABGATE_TEST_SET_BY_A_LIBRARY": None}
    assert os.environ["ABGATE_TEST_SET_BY_A_LIBRARY"] == "1"
