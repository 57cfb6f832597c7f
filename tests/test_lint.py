"""The code stays ruff-clean and mypy --strict clean (config in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.extras  # torch/transformers/ray: run in CI's .venv-extras


def test_ruff_clean() -> None:
    if shutil.which("ruff") is None and not (REPO / ".venv" / "bin" / "ruff").exists():
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_mypy_strict_clean() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    r = subprocess.run([sys.executable, "-m", "mypy", "src/abgate"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
