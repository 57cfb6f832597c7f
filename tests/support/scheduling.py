"""How the test run is spread over pytest-xdist's workers (tests/conftest.py's hooks):
the scope a test is handed to a worker in, the tests that start a real Ray cluster or
share a module-scoped fixture (grouped on one worker), and the ``cost`` marks that
order the scopes longest first."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest


def scope_costs(items: list[pytest.Item]) -> dict[str, float]:
    """Each xdist scope of ``items`` (:func:`scope`) and its tests' ``cost`` marks summed."""
    total: dict[str, float] = {}
    for item in items:
        total[scope(item)] = total.get(scope(item), 0.0) + cost(item)
    return total


def scope(item: pytest.Item) -> str:
    """The unit pytest-xdist's loadgroup hands a worker: the test's group, or the test."""
    group = item.get_closest_marker("xdist_group")
    return str(group.args[0]) if group is not None and group.args else item.nodeid


def cost(item: pytest.Item) -> float:
    """``@pytest.mark.cost(seconds)``: about how long the test takes alone on the
    project's 2-core VM (``--durations`` of a run with ``-n 0``); unmarked tests count 0."""
    mark = item.get_closest_marker("cost")
    return float(mark.args[0]) if mark is not None else 0.0


_RAY_MODULE = re.compile(r"""importorskip\(\s*["']ray["']""")


def starts_ray(item: pytest.Item) -> bool:
    path = getattr(item, "path", None)
    return path is not None and _module_starts_ray(Path(path))


@functools.cache
def _module_starts_ray(path: Path) -> bool:
    try:
        return _RAY_MODULE.search(path.read_text()) is not None
    except OSError:
        return False


def shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope == "module" for chain in defs for d in chain)
