from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="session")
def gsm8k_path() -> Path:
    if not GSM8K.exists():
        pytest.skip(f"GSM8K test set not found at {GSM8K}")
    return GSM8K


@pytest.fixture(scope="session")
def model_path() -> str:
    from abgate.engines.llamacpp import default_model_path

    return str(default_model_path())


def abgate(*args: str, timeout: float = 300, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (as a user would)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "abgate", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=cwd)


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
