"""Where the ledger lives: ``--ledger PATH``, else ``$ABGATE_LEDGER``, else
``$XDG_DATA_HOME/abgate/ledger.sqlite`` (``~/.local/share/abgate/ledger.sqlite``).

``ABGATE_LEDGER=off`` (or ``0``, ``none``) turns the automatic indexing after a run,
A/B, bench or baseline off; the ledger commands then need ``--ledger``.
"""

from __future__ import annotations

import os
from pathlib import Path

from abgate.errors import UsageError

ENV = "ABGATE_LEDGER"
FILE_NAME = "ledger.sqlite"
_OFF = {"off", "0", "none", "false", "no"}


def default_path() -> Path:
    """The ledger file in the user's data directory (XDG base directories)."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "share"
    return root / "abgate" / FILE_NAME


def disabled() -> bool:
    """Whether ``ABGATE_LEDGER`` turns the ledger off."""
    return os.environ.get(ENV, "").strip().lower() in _OFF


def ledger_path(explicit: str | Path | None = None) -> Path:
    """The ledger file to use; a ledger turned off by ``ABGATE_LEDGER`` without an
    explicit path is a usage error."""
    if explicit is not None and str(explicit).strip():
        return Path(explicit).expanduser()
    raw = os.environ.get(ENV, "").strip()
    if raw.lower() in _OFF:
        raise UsageError(f"the ledger is turned off ({ENV}={raw}); give --ledger PATH")
    return Path(raw).expanduser() if raw else default_path()
