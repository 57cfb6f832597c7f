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
