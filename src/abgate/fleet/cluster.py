"""The cluster an A/B runs on: ``--cluster auto|local[:N]|ray://HOST:PORT`` and the
experiment file's ``[cluster]`` table, and the Ray connection for the life of a run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from abgate.errors import AbgateError, UsageError
from abgate.fleet.matching import MATCHED
from abgate.launch_env import as_launched
from abgate.records.fleet import ClusterRecord

Placement = Literal["pack", "spread"]
KEYS = {"replicas", "num_cpus", "num_gpus", "resources", "placement",
        "allow_host_differences", "address", "item_timeout_s", "placement_timeout_s"}


@dataclass(frozen=True)
class ClusterSpec:
    """Where the replicas run and what each one gets (one replica: both arms)."""

    address: str = "local"
    replicas: int = 2
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    placement: Placement = "spread"
    allow_host_differences: tuple[str, ...] = ()
    item_timeout_s: float | None = None  # an item in flight longer: its replica is lost
    placement_timeout_s: float = 300.0  # the replicas' bundles placed within this

    def record(self) -> ClusterRecord:
        """As a fleet's records hold it (``records.fleet.ClusterRecord``)."""
        return ClusterRecord(address=self.address, replicas=self.replicas,
                             num_cpus=self.num_cpus, num_gpus=self.num_gpus,
                             resources=dict(self.resources), placement=self.placement,
                             allow_host_differences=list(self.allow_host_differences),
                             item_timeout_s=self.item_timeout_s,
                             placement_timeout_s=self.placement_timeout_s)


def check_address(address: str) -> str:
    ok = (address in ("auto", "local") or address.startswith("ray://")
          or (address.startswith("local:") and address[6:].isdigit() and int(address[6:]) > 0))
    if not ok:
        raise UsageError(f"--cluster {address!r}: expected auto, local, local:N or "
                         "ray://HOST:PORT")
    return address


def cluster_spec(address: str | None, table: dict[str, Any] | None) -> ClusterSpec:
    """The spec from ``--cluster`` (wins) and the file's ``[cluster]`` table."""
    t = dict(table or {})
    unknown = sorted(set(t) - KEYS)
    if unknown:
        raise UsageError(f"[cluster]: unknown key(s) {unknown}; known: {sorted(KEYS)}")
    addr = check_address(address or str(t.get("address", "local")))
    n_local = int(addr[6:]) if addr.startswith("local:") else None
    replicas = int(t.get("replicas", n_local or 2))
    if replicas < 1:
        raise UsageError("[cluster] replicas: at least 1")
    placement = str(t.get("placement", "spread"))
    if placement not in ("pack", "spread"):
        raise UsageError(f"[cluster] placement {placement!r}: pack or spread")
    allowed = tuple(str(x) for x in t.get("allow_host_differences", ()))
    if unknown := sorted(set(allowed) - set(MATCHED)):
        raise UsageError(f"[cluster] allow_host_differences: unknown {unknown}; known: "
                         f"{list(MATCHED)}")
    return ClusterSpec(addr, replicas, float(t.get("num_cpus", 1.0)),
                       float(t.get("num_gpus", 0.0)),
                       {str(k): float(v) for k, v in dict(t.get("resources", {})).items()},
                       "pack" if placement == "pack" else "spread",
                       allowed, _timeout("item_timeout_s", t.get("item_timeout_s")),
                       _timeout("placement_timeout_s", t.get("placement_timeout_s")) or 300.0)


def _timeout(key: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UsageError(f"[cluster] {key} {value!r}: a number of seconds > 0")
    return float(value)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--cluster needs Ray: pip install 'abgate[ray]'") from None
    return ray


@contextmanager
def connected(spec: ClusterSpec) -> Iterator[Any]:
    """Ray, connected for the block: to a running cluster (``auto``, ``ray://``), or a
    local one abgate starts and stops itself (``local[:N]``). A Ray already initialised
    in this process (a test's cluster) is used as it is and left running."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    if spec.address.startswith("local"):
        n = int(spec.address[6:]) if ":" in spec.address else None
        # address="local": a new cluster, never one another process runs on this host
        # (without it ray.init joins that one, and refuses num_cpus); its processes get
        # the environment abgate was launched in, not one an imported library edited
        with as_launched():
            ray.init(address="local",
                     num_cpus=n or max(1, int(spec.replicas * spec.num_cpus)),
                     include_dashboard=False, log_to_driver=False)
        reaper, pids = start_reaper()
    else:
        ray.init(address=spec.address, log_to_driver=False)
        reaper, pids = None, []
    try:
        yield ray
    finally:
        ray.shutdown()
        if reaper is not None:  # the cluster's processes now: every one stopped
            reaper.kill()
            reaper.wait()
            from abgate.fleet.reaper import reap

            reap(pids)


def start_reaper() -> tuple[Any, list[int]]:
    """A reaper of the local cluster just started (every child of this process now)."""
    import os

    import psutil

    from abgate.fleet.reaper import start

    pids = [c.pid for c in psutil.Process().children()]
    return start(os.getpid(), pids), pids


def placed(ray: Any, spec: ClusterSpec) -> Any:
    """A placement group of one bundle per replica (``spec``'s CPUs, GPUs and custom
    resources), ready; an AbgateError naming the shortfall when the cluster has no
    room within ``placement_timeout_s``."""
    from ray.util.placement_group import placement_group

    bundle: dict[str, float] = {"CPU": spec.num_cpus, **spec.resources}
    if spec.num_gpus:
        bundle["GPU"] = spec.num_gpus
    pg = placement_group([dict(bundle) for _ in range(spec.replicas)],
                         strategy="PACK" if spec.placement == "pack" else "SPREAD")
    ready, _ = ray.wait([pg.ready()], timeout=spec.placement_timeout_s)
    if not ready:
        removed(pg)
        raise AbgateError(f"the cluster has no room for {spec.replicas} replica(s) of "
                          f"{bundle} within {spec.placement_timeout_s:g} s "
                          f"(free: {ray.available_resources()}); fewer replicas, "
                          "smaller bundles or more nodes")
    return pg


def in_bundle(spec: ClusterSpec, pg: Any, index: int) -> dict[str, Any]:
    """``actor.options(...)`` for replica ``index``: its bundle's resources, in it."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {"num_cpus": spec.num_cpus, "num_gpus": spec.num_gpus or None,
            "resources": spec.resources or None,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=index)}


def removed(pg: Any) -> None:
    """The placement group goes with its run: left behind, its bundles keep the
    cluster's resources from the next one (seen: the next A/B's replicas never
    placed, the wait ending only at its timeout)."""
    import contextlib

    from ray.util.placement_group import remove_placement_group

    if pg is not None:
        with contextlib.suppress(Exception):
            remove_placement_group(pg)
