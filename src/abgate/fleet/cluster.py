"""The cluster an A/B runs on: ``--cluster auto|local[:N]|ray://HOST:PORT`` and the
experiment file's ``[cluster]`` table, and the Ray connection for the life of a run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from abgate.errors import UsageError
from abgate.fleet.matching import MATCHED

Placement = Literal["pack", "spread"]
KEYS = {"replicas", "num_cpus", "num_gpus", "resources", "placement",
        "allow_host_differences", "address", "item_timeout_s"}


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

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "replicas": self.replicas, "num_cpus": self.num_cpus,
                "num_gpus": self.num_gpus, "resources": dict(self.resources),
                "placement": self.placement,
                "allow_host_differences": list(self.allow_host_differences),
                "item_timeout_s": self.item_timeout_s}


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
                       allowed, _timeout(t.get("item_timeout_s")))


def _timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UsageError(f"[cluster] item_timeout_s {value!r}: a number of seconds > 0")
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
        ray.init(num_cpus=n or max(1, int(spec.replicas * spec.num_cpus)),
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
