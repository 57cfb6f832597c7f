"""Thin command-line layer over abgate's public API.

Every command module registers itself on :data:`abgate.cli.app.app`. Errors that
abgate raises on purpose print as one line (``abgate: error: ...``) and exit with
the error's code (2 for bad input, 1 for failures); nothing prints a traceback.
"""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from abgate.cli import (  # noqa: F401  (registers commands)
    ab_cmd,
    baseline_cmd,
    bench_cmd,
    decide_cmd,
    extract_cmd,
    ledger_cmd,
    provenance_cmd,
    report_cmd,
    run_cmd,
    verify_cmd,
    weights_cmd,
)
from abgate.cli.app import app
from abgate.errors import AbgateError
from abgate.redact import redact_text
from abgate.runner.execute import Interrupted
from abgate.schema import usage_error


def main() -> None:
    """Console-script entry point."""
    try:
        try:
            rc = app(standalone_mode=False)
        except ValidationError as exc:  # a config made in code from a bad value: one line
            raise usage_error(exc, None, exc.title) from None
    except AbgateError as exc:
        print(f"abgate: error: {redact_text(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the environment's (a full disk, a directory gone): one line
        print(f"abgate: error: {redact_text(str(exc))}", file=sys.stderr)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt, Interrupted):  # Ctrl-C outside a tracked run
        print("abgate: interrupted", file=sys.stderr)
        sys.exit(130)
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
