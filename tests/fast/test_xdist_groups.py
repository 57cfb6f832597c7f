"""The README's command runs a module's tests that share a module-scoped fixture on one
worker, and the modules that start a real Ray cluster on one worker (tests/conftest.py
marks them with ``xdist_group``; ``--dist loadgroup`` in pyproject.toml). pytest 9.2's
node IDs broke that silently (pytest-dev/pytest-xdist#1386: every test spread as if
unmarked), hence pyproject's ``pytest<9.2``; this test fails the day the grouping stops
again."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def shared() -> int:
    return 1


def test_a_grouped_test_runs_in_its_group(request: pytest.FixtureRequest, shared: int) -> None:
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not in an xdist worker (-n 0)")
    if not request.config.getvalue("loadgroup"):
        pytest.skip("not --dist loadgroup")
    assert request.node.nodeid.endswith("@tests/fast/test_xdist_groups.py"), (
        f"{request.node.nodeid}: the xdist_group mark did not reach the scheduler "
        "(pytest-dev/pytest-xdist#1386)")


def test_the_costliest_scopes_come_first(request: pytest.FixtureRequest) -> None:
    """After the Ray group, the scopes (groups, or single tests) in this run's collection
    are in order of their summed ``cost`` marks, and xdist is told to keep that order."""
    from tests.support.scheduling import scope, scope_costs, starts_ray

    items = [i for i in request.session.items if not starts_ray(i)]
    cost = scope_costs(items)
    order = [cost[scope(i)] for i in items]
    assert order == sorted(order, reverse=True), order[:20]
    if getattr(request.config.option, "dist", "no") == "loadgroup":
        assert request.config.getoption("loadscopereorder") is False
