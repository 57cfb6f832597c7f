"""Finishing as one idempotent step: ``finish(dir)`` completes whatever a signal (or a
kill) left undone after a run or an A/B was recorded finished, from its saved records
only: an A/B's ``comparison.json`` and reports (``ab.finish``), a run's
``summary.json`` (``runner.complete``), and the ledger entry of either. ``abgate run``,
``ab``, ``decide``, ``report``, ``attach`` and every ``--resume`` end with it, so any
later command completes a finishing that was cut short. Signals during it are
deferred (``abgate.signals.deferred``): what it writes is written whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from abgate import signals
from abgate.ab.finish import finish_ab
from abgate.ab.state import AB_FILE
from abgate.dirlock import exclusive
from abgate.errors import UsageError
from abgate.ledger.index import Added, index_quietly
from abgate.runner import records as rec
from abgate.runner.complete import finish_run

LEDGER_PART = "ledger entry"


@dataclass(frozen=True)
class Finished:
    """What one :func:`finish` wrote: file names, and ``ledger entry`` when the ledger
    had no (or an outdated) entry; ``busy``: another writer held the directory, so its
    files were left to a later command."""

    parts: list[str] = field(default_factory=list)
    added: Added | None = None
    busy: str | None = None


def _records(out: Path) -> list[str]:
    if (out / AB_FILE).is_file():
        return finish_ab(out)
    if (out / rec.RUN_FILE).is_file():
        return finish_run(out)
    return []


def finish(out: Path) -> Finished:
    """Complete ``out``'s finishing (see the module); a finished directory is left as it
    is and its ledger entry unchanged."""
    with signals.deferred():
        busy = None
        try:
            with exclusive(out):
                parts = _records(out)
        except UsageError as exc:
            if "is being written by" not in str(exc):
                raise
            parts, busy = [], str(exc)
        signals.pause_point("ledger")
        added = index_quietly(out)
        if added is not None and added.action in ("new", "updated", "moved"):
            parts.append(LEDGER_PART)
        return Finished(parts, added, busy)
