"""``from abgate.cli import app`` is the Typer app whatever was imported before it. The
app's module was ``abgate.cli.app``: once a test module imported it, the package's
attribute ``app`` was that module, and the README's parse tests failed with "module
'abgate.cli.app' has no attribute '_add_completion'" when such a module ran first on
their worker."""

from __future__ import annotations

import importlib
import pkgutil

import typer

import abgate.cli


def test_no_submodule_of_the_cli_is_named_app() -> None:
    names = {m.name for m in pkgutil.iter_modules(abgate.cli.__path__)}
    assert "app" not in names, names


def test_the_app_is_the_typer_app_after_every_cli_module_is_imported() -> None:
    for m in pkgutil.iter_modules(abgate.cli.__path__):
        importlib.import_module(f"abgate.cli.{m.name}")
    from abgate.cli import app

    assert isinstance(app, typer.Typer)
