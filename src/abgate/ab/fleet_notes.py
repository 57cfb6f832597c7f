"""What the analysis reads of a fleet A/B's ``fleet`` section (``records.fleet``, written
by ``abgate.fleet``): the replica each item ran on (the replica-clustered speed interval)
and the notes a verdict gets on what it rests on (replicas, losses, declared host
differences)."""

from __future__ import annotations

from abgate.records.fleet import FleetRecord, FleetSession

AGREEMENT_PASS = "agreement pass"  # a FleetLoss's ``at`` when lost while scoring


def sessions(fleet: FleetRecord | None) -> list[FleetSession]:
    """The fleet sessions of an A/B, earliest first (a resume ran on another cluster:
    its replicas are other ones)."""
    return fleet.sessions() if fleet is not None else []


def replica_of_items(fleet: FleetRecord | None) -> dict[str, str]:
    """Item id -> the replica its first (item, seed) key ran on (``s.i``: replica i of
    session s when the A/B ran in more than one fleet session)."""
    out: dict[str, str] = {}
    runs = sessions(fleet)
    for n, run in enumerate(runs):
        for replica, keys in sorted((run.items_by_replica or {}).items()):
            label = f"{n}.{replica}" if len(runs) > 1 else str(replica)
            for key in keys:
                out.setdefault(str(key).rsplit("#", 1)[0], label)
    return out


def fleet_notes(fleet: FleetRecord | None) -> list[str]:
    """The verdict's notes for a fleet A/B (none for one machine)."""
    if fleet is None:
        return []
    by = {str(k): len(v) for k, v in (fleet.items_by_replica or {}).items()}
    counts = ", ".join(f"replica {k}: {n}" for k, n in sorted(by.items()))
    notes = [f"Fleet A/B: {len(fleet.replicas or [])} replica(s), both arms of every "
             f"item on one replica (items {counts}); speed intervals clustered by replica."]
    declared = list(fleet.host_differences or [])
    if declared:
        notes.append("Declared host differences between the replicas: "
                     f"{', '.join(map(str, declared))}.")
    if len(sessions(fleet)) > 1:
        notes.append(f"Resumed on another fleet: {len(sessions(fleet))} fleet sessions; the "
                     "replicas of each are clusters of their own.")
    for loss in (x for run in sessions(fleet) for x in run.lost or []):
        if loss.at == AGREEMENT_PASS:
            notes.append(f"Replica {loss.replica} was lost in the agreement pass "
                         f"({loss.error}): the sample it was scoring was scored whole on "
                         "another replica, so each sample's rows come from one replica.")
            continue
        notes.append(f"Replica {loss.replica} was lost at {loss.at} "
                     f"({loss.error}): nothing of its item in flight was written; "
                     "it ran again on another replica, so the verdict rests on every "
                     f"item once, {sum(by.values())} in all, from the surviving "
                     "replicas and what the lost one finished before.")
    return notes
