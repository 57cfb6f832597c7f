"""The CLI's side of finishing (``ledger.finish``): the ledger line, the one line a
``--resume`` of a finished directory prints, and a workflow cut short by a signal
while it finished."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from abgate import signals
from abgate.ledger.finish import LEDGER_PART, finish


def finish_dir(out: Path) -> list[str]:
    """Complete ``out``'s finishing; print the ledger line as ``index_finished`` does
    (and a warning when another writer held it); return the parts written."""
    done = finish(out)
    if done.added is not None and LEDGER_PART in done.parts:
        typer.echo(f"ledger: {done.added.action} {done.added.entry.kind} "
                   f"{done.added.entry.id[:12]}", err=True)
    if done.busy:
        typer.echo(f"warning: {out}'s reports were not brought up to date now ({done.busy})",
                   err=True)
    return done.parts


def resumed_line(what: str, out: Path, parts: list[str]) -> str:
    """What ``--resume`` of a finished directory says, in one line."""
    if not parts:
        return f"{what} {out} is already complete; nothing to resume"
    return (f"{what} {out} was complete, but its finishing had been cut short; completed: "
            f"{', '.join(parts)}")


@contextmanager
def finishing(out: Path) -> Iterator[None]:
    """Around a workflow whose finishing defers signals: when one came there, the
    finishing it did is completed here too (the ledger entry) before the command stops."""
    try:
        yield
    except signals.Stopped as exc:
        if exc.done:
            finish_dir(out)
        elif exc.out is None and _finished_record(out):
            exc.out = out  # between the records and the finishing: --resume completes it
        raise


def _finished_record(out: Path) -> bool:
    """Whether ``out`` holds a run or A/B recorded finished (not ``running``)."""
    for marker in ("ab.json", "run.json"):
        try:
            status = json.loads((out / marker).read_text(encoding="utf-8")).get("status")
        except (OSError, ValueError, AttributeError):
            continue
        return status in ("complete", "interrupted", "failed")
    return False
