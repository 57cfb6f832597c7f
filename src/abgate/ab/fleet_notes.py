"""What the analysis reads of a fleet A/B's ``fleet`` section (written by
``abgate.fleet``): the replica each item ran on (the replica-clustered speed interval)
and the notes a verdict gets on what it rests on (replicas, losses, declared host
differences)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def replica_of_items(fleet: Mapping[str, Any] | None) -> dict[str, str]:
    """Item id -> the replica its first (item, seed) key ran on."""
    out: dict[str, str] = {}
    for replica, keys in sorted(dict((fleet or {}).get("items_by_replica") or {}).items()):
        for key in keys:
            out.setdefault(str(key).rsplit("#", 1)[0], str(replica))
    return out


def fleet_notes(fleet: Mapping[str, Any] | None) -> list[str]:
    """The verdict's notes for a fleet A/B (none for one machine)."""
    if not fleet:
        return []
    by = {str(k): len(v) for k, v in dict(fleet.get("items_by_replica") or {}).items()}
    counts = ", ".join(f"replica {k}: {n}" for k, n in sorted(by.items()))
    notes = [f"Fleet A/B: {len(fleet.get('replicas') or [])} replica(s), both arms of every "
             f"item on one replica (items {counts}); speed intervals clustered by replica."]
    declared = list(fleet.get("host_differences") or [])
    if declared:
        notes.append("Declared host differences between the replicas: "
                     f"{', '.join(map(str, declared))}.")
    for loss in fleet.get("lost") or []:
        notes.append(f"Replica {loss.get('replica')} was lost at {loss.get('at')} "
                     f"({loss.get('error')}): nothing of its item in flight was written; "
                     "it ran again on another replica, so the verdict rests on every "
                     f"item once, {sum(by.values())} in all, from the surviving "
                     "replicas and what the lost one finished before.")
    return notes
