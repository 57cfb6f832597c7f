"""``ab.json``'s ``fleet`` section, typed (a fleet A/B: ``abgate.fleet`` on Ray, or an
endpoint fleet): one session's cluster or endpoints, each replica's facts, the losses
and the items each replica ran (:class:`FleetSession`), and in :class:`FleetRecord` the
earlier sessions of a resumed A/B with what this one declared, took and left behind.
Written by ``fleet.coordinator`` and ``fleet.endpoints`` (fields in that order), read
by the analysis (``ab.analyze``) and kept by a resume (``fleet.dispatch``)."""

from __future__ import annotations

from typing import Any

from abgate.records.sections import Number, Section

__all__ = ["ClusterRecord", "FleetLoss", "FleetRecord", "FleetSession", "ReplicaFacts"]


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


class ReplicaFacts(Section):
    """One replica's facts, in the order they are written: where it runs
    (``fleet.replica.host_facts``: a Ray worker's node, address, process, CPU and GPUs; an
    endpoint fleet's URL), the engines it loaded (``Replica.engine_facts``), its process
    tree and mapped libraries, and what the close and the dispatch found. The keys
    ``fleet.matching.MATCHED`` names must be alike across replicas; a field a replica
    has no fact for is not written."""

    index: int | None = None
    endpoint: str | None = None
    node_id: str | None = None
    address: str | None = None
    pid: int | None = None
    actor_id: str | None = None
    cpu_model: str | None = None
    gpu_ids: list[str] | None = None
    gpu_uuids: list[str] | None = None
    gpu_model: list[str] | None = None
    driver: list[str] | None = None
    engines: dict[str, Any] | None = None  # arm -> {"version", "engine"}
    engine_config: dict[str, str] | None = None  # arm -> its effective config's digest
    process_tree: list[int] | None = None
    libraries: dict[str, str] | None = None  # basename -> SHA-256
    closed: dict[str, Any] | None = None  # the engines' cleanup, GPU memory after
    busy_s: Number | None = None  # an endpoint's time in requests (the dispatch's)


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
    replicas: list[ReplicaFacts] | None = None
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
    # baseline samples each replica scored in the agreement pass (spread over the live ones)
    agreement_by_replica: dict[int, int] | None = None

    def sessions(self) -> list[FleetSession]:
        """The fleet sessions of the A/B, earliest first (the replicas of each are
        clusters of their own)."""
        return [*(self.earlier or []), self]
