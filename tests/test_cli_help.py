"""Every command's ``--help`` shows its help text as written: bracketed words such as
``[evidence]`` or ``abgate[weights]`` are not taken for markup and dropped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

from abgate.cli import app


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``cmd`` (Typer may vendor its own click, so this
    goes by attributes rather than click's classes)."""
    yield path, cmd
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_bracketed_words_survive_in_every_help() -> None:
    root = get_command(app)
    runner = CliRunner()
    checked = 0
    for path, cmd in _commands(root):
        shown = _flat(runner.invoke(app, [*path, "--help"], terminal_width=100).output)
        texts = [p.help for p in cmd.params if getattr(p, "help", None)]
        for text in [*texts, cmd.help or ""]:
            for word in re.findall(r"\S*\[[^\]\s]+\]\S*", text):
                assert word in shown, (path, word)
                checked += 1
    assert checked >= 3  # ab's [evidence] (twice) and abgate[weights] at least


def test_ab_help_names_the_evidence_table_and_the_weights_extra() -> None:
    shown = _flat(CliRunner().invoke(app, ["ab", "--help"], terminal_width=100).output)
    assert "(default: the file's [evidence], on)" in shown
    assert "(abgate[weights])" in shown
