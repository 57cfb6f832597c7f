"""``ab.json``'s ``fleet`` section, typed (a fleet A/B: ``abgate.fleet`` on Ray, or an
endpoint fleet): one session's cluster or endpoints, each replica's facts, the losses
and the items each replica ran (:class:`FleetSession`), and in :class:`FleetRecord` the
earlier sessions of a resumed A/B with what this one declared, took and left behind.
Written by ``fleet.coordinator`` and ``fleet.endpoints`` (fields in that order), read
by the analysis (``ab.fleet_notes``) and kept by a resume (``fleet.dispatch``)."""

from __future__ import annotations

from typing import Any

from abgate.records.sections import Number, Section

__all__ = ["ClusterRecord", "FleetLoss", "FleetRecord", "FleetSession"]


class ClusterRecord(Section):
    """The cluster a fleet ran on, as recorded (``fleet.cluster.ClusterSpec.record``):
    where the replicas run and what each one gets."""

    address: str | None = None
    replicas: int | None = None
    num_cpus: Number | None = None
    num_gpus: Number | None = None
    resources: dict[str, Number] | None = None
    placement: str | None = None
    allow_host_differences: list[str] | None = None
    item_timeout_s: Number | None = None
    placement_timeout_s: Number | None = None


class FleetLoss(Section):
    """A replica lost mid-item: which, at which (item, seed) key, why, when."""

    replica: int | None = None
    at: str | None = None
    error: str | None = None
    time: Number | None = None


class FleetSession(Section):
    """One fleet session: the cluster (Ray) or the endpoints, the replicas' facts
    (``fleet.replica`` host and engine facts), the losses and the items per replica."""

    cluster: ClusterRecord | None = None
    endpoints: list[str] | None = None
    replicas: list[dict[str, Any]] | None = None
    lost: list[FleetLoss] | None = None
    items_by_replica: dict[str, list[str]] | None = None

    def session(self) -> FleetSession:
        """This session alone, as a later session keeps it (``earlier``)."""
        return FleetSession.model_validate(self.model_dump(
            include={"cluster", "endpoints", "replicas", "lost", "items_by_replica"},
            exclude_unset=True))


class FleetRecord(FleetSession):
    """``ab.json``'s ``fleet``: this session, the earlier ones (a resume ran on another
    fleet), the declared host differences, the dispatch's wall time and, on Ray, the
    actors left after close."""

    earlier: list[FleetSession] | None = None
    host_differences: list[str] | None = None
    dispatch_wall_s: Number | None = None
    actors_after_close: dict[str, Any] | None = None
    # the replica the agreement pass and the probes ran on (fleet.coordinator.evidence)
    evidence_replica: int | None = None

    def sessions(self) -> list[FleetSession]:
        """The fleet sessions of the A/B, earliest first (the replicas of each are
        clusters of their own)."""
        return [*(self.earlier or []), self]
