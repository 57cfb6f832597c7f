"""The in-process kit the fast tier's CLI tests stand on: ``engine_refused`` (the twin of
``no_engine_env``) notices a command that gets as far as an engine, and ``cli`` runs the
command with the environment and directory given, restoring both after."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import engine_refused
from tests.support.fake import cli


def test_a_command_that_loads_llama_cpp_is_noticed(tmp_path: Path) -> None:
    out = tmp_path / "R"
    with engine_refused() as imported:
        r = cli("run", "--suite", "synthetic", "--limit", "1", "--max-tokens", "2",
                "-o", str(out))
    assert r.returncode != 0 and imported == ["abgate.engines.llamacpp.engine.LlamaCppEngine"]


def test_importing_llama_cpp_is_refused_and_noticed_then_restored() -> None:
    before = sys.modules.get("llama_cpp")
    with engine_refused() as imported:
        with pytest.raises(ImportError, match="although the input was bad"):
            importlib.import_module("llama_cpp.llama_chat_format")
        assert imported == ["llama_cpp"]
    assert sys.modules.get("llama_cpp") is before


def test_cli_env_and_cwd_hold_for_the_call_only(tmp_path: Path) -> None:
    ledger = tmp_path / "other.sqlite"
    (tmp_path / "notes").mkdir()
    cwd, before = Path.cwd(), os.environ["ABGATE_LEDGER"]
    r = cli("ledger", "ls", env={"ABGATE_LEDGER": str(ledger)})
    assert r.returncode == 0 and ledger.exists() and "0 records" in r.stdout, r.stderr
    assert os.environ["ABGATE_LEDGER"] == before
    assert "not an A/B directory" in cli("report", "notes", cwd=tmp_path).stderr
    assert Path.cwd() == cwd and "no such" in cli("report", "notes").stderr
