"""A process imports only the command module it runs (``abgate.cli.COMMAND_MODULES``):
the map names every command, each in the module that registers it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from abgate import cli


def _registered(app: object) -> set[str]:
    return ({c.name for c in app.registered_commands}  # type: ignore[attr-defined]
            | {g.name for g in app.registered_groups})  # type: ignore[attr-defined]


def test_the_map_names_every_command_in_its_own_module() -> None:
    assert _registered(cli._commands([])) == set(cli.COMMAND_MODULES)
    for name, module in cli.COMMAND_MODULES.items():
        mod = importlib.import_module(f"abgate.cli.{module}")
        assert f'"{name}"' in Path(mod.__file__ or "").read_text(), (name, module)


def test_one_command_imports_one_command_module() -> None:
    code = ("import sys; from abgate import cli; cli._commands(['decide', '--help']); "
            "print(sorted(m for m in sys.modules if m.endswith('_cmd')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "abgate.cli.decide_cmd" in out and "abgate.cli.ab_cmd" not in out, out
    assert "abgate.cli.bench_cmd" not in out, out
    typo = subprocess.run([sys.executable, "-m", "abgate", "repot"], capture_output=True,
                          text=True)
    assert typo.returncode == 2 and "Did you mean 'report'" in typo.stderr
