"""CI runs the tests that need an optional extra (torch, transformers, ray) once, in its
.venv-extras, by their ``extras`` marker, and everything else once, in the README's
environment (.ci/run). A test file that skips without such an extra and lacks the marker would
run nowhere; this check finds it."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

NEEDS = re.compile(r"""importorskip\(\s*["'](torch|transformers|ray)["']""")


def test_every_file_that_skips_without_an_extra_carries_the_extras_marker() -> None:
    unmarked = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text()
        if NEEDS.search(text) and "pytest.mark.extras" not in text:
            unmarked.append(str(path.relative_to(REPO)))
    assert unmarked == []



def test_the_extras_tier_collects_every_extras_module() -> None:
    """``-m extras`` (CI's extras tier) imports the modules marked ``engine`` and
    ``extras`` as a whole; the fast tier's ``-m "not engine"`` skips importing them
    (conftest.pytest_ignore_collect). From 2026-12-04 to 12-06 a module marked
    ``[pytest.mark.engine, pytest.mark.extras]`` was not imported under ``-m extras``:
    CI's extras tier ran 25 of 41 tests, none of the Ray fleet's, and passed."""
    from tests.conftest import can_select

    both, engine = {"engine", "extras"}, {"engine"}
    assert can_select("extras", both)
    assert not can_select("not engine", both) and not can_select("not engine", engine)
    assert can_select("engine", engine) and can_select("engine and not extras", engine)
    assert not can_select("engine and not extras", both)
    # a test of the module may add a mark of its own
    assert can_select("extras", engine) and can_select("slow", engine)
    assert can_select("engine and slow", engine)
    assert can_select("extras or slow", engine) and not can_select("not (engine or slow)",
                                                                   engine)


def test_only_a_selection_without_engine_tests_gets_two_workers_a_core(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``-n auto`` (pyproject.toml): two xdist workers a core for the fast tier alone, whose
    tests mostly wait on the processes they start; one a core wherever an engine test may
    run, whose tokens and speed are its core's (three workers on 2 cores gave a no-op
    revision A/B -13% speed, INCONCLUSIVE, 2026-12-06)."""
    from types import SimpleNamespace

    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_count

    from tests.conftest import pytest_xdist_auto_num_workers

    def config(expr: str) -> SimpleNamespace:
        return SimpleNamespace(getoption=lambda name: expr,
                               option=SimpleNamespace(numprocesses="auto"))

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    cores = xdist_count(config(""))
    assert cores >= 1
    for expr, workers in (("not engine", 2 * cores), ("not engine and not slow", 2 * cores),
                          ("engine", None), ("extras", None), ("", None), ("slow", None)):
        assert pytest_xdist_auto_num_workers(config(expr)) == workers, expr
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")  # the user's count stands
    assert pytest_xdist_auto_num_workers(config("not engine")) is None
