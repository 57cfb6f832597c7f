"""What Ray's state APIs answer, read here: the nodes Ray counts alive (``ray.nodes()``)
and the actors' states (``ray.util.state.list_actors``, else the GCS actor table). Ray's
dicts, not abgate's records (``tests/tools/key_reads.py`` names this module apart)."""

from __future__ import annotations

from typing import Any


def alive_nodes(ray: Any) -> set[str]:
    """The IDs of the nodes Ray counts alive."""
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def actor_states(actor_ids: list[str], api: bool = True) -> tuple[dict[str, str], str]:
    """Actor id -> state, and which API answered."""
    try:
        from ray.util.state import list_actors

        if not api:
            raise LookupError("the state API did not answer before")
        return ({a.actor_id: a.state for a in list_actors(
            limit=10_000, timeout=10, raise_on_missing_output=False)
                 if a.actor_id in actor_ids}, "ray.util.state.list_actors")
    except Exception:  # no dashboard server (ray without its [default] extra)
        from ray._private.state import actors

        return ({a: str((actors(actor_id=a) or {}).get("State", "DEAD")) for a in actor_ids},
                "GCS actor table (ray._private.state.actors)")
