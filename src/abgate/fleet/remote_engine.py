"""An arm's engine on a replica, seen from the coordinator: an
:class:`~abgate.engines.proxy.ProxyEngine` whose members are calls to the replica actor
(``Replica.call``), so the evidence passes of one machine (``ab.phases.gather_evidence``:
the distribution-agreement pass, the health probes) run unchanged on a replica where both
arms are resident, each request under its arm's env on that replica."""

from __future__ import annotations

from typing import Any

from abgate.engines.base import Capabilities, EngineInfo
from abgate.engines.proxy import ProxyEngine

CALL_TIMEOUT_S = 900.0


class ReplicaEngine(ProxyEngine):
    """Arm ``arm`` of replica actor ``actor`` (``ray`` is the connected module)."""

    loaded_by = "its replica (abgate.fleet)"

    def __init__(self, ray: Any, actor: Any, arm: str) -> None:
        self.ray, self.actor, self.arm = ray, actor, arm
        self.info: EngineInfo = self.call("describe")
        self.capabilities: Capabilities = self.info.capabilities

    def call(self, op: str, *args: Any) -> Any:
        return self.ray.get(self.actor.call.remote(self.arm, op, args), timeout=CALL_TIMEOUT_S)

    def describe(self) -> EngineInfo:
        return self.info
