"""Thin command-line layer over abgate's public API.

Every command module registers itself on :data:`abgate.cli.typer_app.app`. Errors that
abgate raises on purpose print as one line (``abgate: error: ...``) and exit with
the error's code (2 for bad input, 1 for failures); nothing prints a traceback.
Ctrl-C and SIGTERM are handled from the first line of :func:`main`, before the
commands (typer, pydantic, numpy) are imported: one line, exit 130.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from abgate import signals

# each command (``abgate NAME``) and the module that registers it: a process imports only
# the one it runs (its workflow's imports are most of a start-up); tests/fast/test_cli_lazy.py
# checks that this covers every command
COMMAND_MODULES = {"ab": "ab_cmd", "baseline": "baseline_cmd", "bench": "bench_cmd",
                   "decide": "decide_cmd", "engines": "engines_cmd", "extract": "extract_cmd",
                   "ledger": "ledger_cmd", "history": "ledger_cmd", "compare": "ledger_cmd",
                   "plan": "plan_cmd", "manifest": "provenance_cmd",
                   "attach": "provenance_cmd", "report": "report_cmd", "run": "run_cmd",
                   "verify": "verify_cmd", "sign": "verify_cmd", "weights-diff": "weights_cmd"}


def _commands(argv: list[str] | None = None) -> Any:
    """The Typer app with the command that ``argv`` (default ``sys.argv``) runs
    registered, or every command (no command named, an option first, an unknown name:
    the help and a close match need them all)."""
    import importlib

    args = sys.argv[1:] if argv is None else argv
    one = COMMAND_MODULES.get(args[0]) if args else None
    for module in [one] if one else sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(f"abgate.cli.{module}")
    from abgate.cli.typer_app import app as typer_app

    if not one:
        globals()["app"] = typer_app
    return typer_app


def __getattr__(name: str) -> Any:
    # ``from abgate.cli import app``: the Typer app, every command registered. (The app's
    # module is ``typer_app``, not ``app``: a submodule ``abgate.cli.app``, once imported,
    # became the package's attribute ``app``, and this import returned the module.)
    if name == "app":
        return _commands([])
    raise AttributeError(f"module 'abgate.cli' has no attribute {name!r}")


def _stopped(exc: signals.Stopped) -> None:
    what = signals.name(exc.signum)
    if exc.done:
        print(f"abgate: interrupted ({what}) while finishing; the finishing was completed "
              "first, nothing is left to resume", file=sys.stderr)
    elif exc.out is not None:
        print(f"abgate: interrupted ({what}) before {os.fspath(exc.out)} was finished; "
              f"--resume {os.fspath(exc.out)} completes it", file=sys.stderr)
    else:
        print(f"abgate: interrupted ({what})", file=sys.stderr)
    sys.exit(signals.INTERRUPTED)


def main() -> None:
    """Console-script entry point."""
    previous = signals.install()
    try:
        try:
            signals.pause_point("imports")
            _run(_commands())
        except signals.Stopped as exc:
            _stopped(exc)
        except KeyboardInterrupt:  # a Ctrl-C simulated in code, or one before install
            print("abgate: interrupted", file=sys.stderr)
            sys.exit(signals.INTERRUPTED)
    finally:
        signals.restore(previous)


# The click command Typer builds from the app, keyed by the commands registered when it
# was built. Typer builds it anew on every call (every option of every registered
# command, from the functions' signatures): once per process for a user, but in one
# process that runs many commands (the tests' in-process CLI) that was 23 of the fast
# tier's CPU seconds.
_BUILT: dict[tuple[int, ...], Any] = {}


def _click_command(app: Any) -> Any:
    from typer.main import get_command

    key = _registered(app)
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = get_command(app)
    return _BUILT[key]


def _registered(app: Any) -> tuple[int, ...]:
    """Every command and group registered on ``app`` and on its groups, by identity."""
    groups = app.registered_groups
    return (*map(id, (*app.registered_commands, *groups)),
            *(k for g in groups for k in _registered(g.typer_instance)))


def _run(app: Any) -> None:
    import typer
    from pydantic import ValidationError

    from abgate.errors import AbgateError
    from abgate.redact import redact_text
    from abgate.schema import usage_error

    try:
        try:
            rc = _click_command(app)(standalone_mode=False)
        except ValidationError as exc:  # a config made in code from a bad value: one line
            raise usage_error(exc, None, exc.title) from None
    except AbgateError as exc:
        print(f"abgate: error: {redact_text(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the environment's (a full disk, a directory gone): one line
        print(f"abgate: error: {redact_text(str(exc))}", file=sys.stderr)
        sys.exit(1)
    except (typer.Abort, signals.Interrupted):  # Ctrl-C outside a tracked run
        print("abgate: interrupted", file=sys.stderr)
        sys.exit(signals.INTERRUPTED)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        # Click's own usage errors (Typer may vendor click, so match by shape, not type).
        show = getattr(exc, "show", None)
        if show is None or not hasattr(exc, "exit_code"):
            raise
        show()
        sys.exit(2)
    sys.exit(rc if isinstance(rc, int) else 0)


__all__ = ["app", "main"]
