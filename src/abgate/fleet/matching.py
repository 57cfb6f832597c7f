"""Replicas must be alike: the host facts that make a pair comparable across
replicas are checked before any measurement, unless the difference is declared."""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

from abgate.errors import UsageError
from abgate.records.fleet import ReplicaFacts

if TYPE_CHECKING:
    from abgate.ab.experiment import Experiment

MATCHED = ("cpu_model", "gpu_model", "driver", "engines", "engine_config", "libraries")


def check_matched(facts: list[ReplicaFacts], allowed: tuple[str, ...]) -> list[str]:
    """The declared differences found (for the record); an undeclared one is refused."""
    found = differences(facts)
    refused = [k for k in found if k not in allowed]
    if refused:
        raise UsageError(f"the replicas' hosts differ in {', '.join(refused)}; a pair on "
                         "one replica is matched, but replicas are compared in the speed "
                         "interval: declare it with [cluster] allow_host_differences = "
                         f"{refused!r}, or use alike nodes")
    return found


def differences(facts: list[ReplicaFacts]) -> list[str]:
    """The :data:`MATCHED` fields in which the replicas' facts differ."""
    found = [key for key in MATCHED[:-1] if len({repr(getattr(f, key)) for f in facts}) > 1]
    return found + (["libraries"] if library_differences(facts) else [])


def library_differences(facts: list[ReplicaFacts]) -> list[str]:
    """Libraries every replica maps whose bytes differ between replicas (a library one
    process happened to map and another not is no difference of the host)."""
    maps = [dict(f.libraries or {}) for f in facts]
    common = set.intersection(*(set(m) for m in maps)) if maps else set()
    return sorted(n for n in common if len({m[n] for m in maps}) > 1)


def arm_order(arms: list[str], item_id: str, seed: int) -> list[str]:
    """The arms of one item in an order drawn from (item, seed): reproducible, the same
    on every replica and pool."""
    digest = hashlib.sha256(f"{item_id}\0{seed}".encode()).digest()
    order = list(arms)
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def check_schedule(exp: Experiment) -> None:
    """A fleet runs both arms resident on every replica; sequential looks fall on the
    merged stream (written in key order), but the agreement pass of a look scores on
    engines in this process, which a fleet does not load."""
    if exp.schedule.sequential and exp.evidence.agreement:
        raise UsageError("--cluster with sequential stopping: the agreement pass of each "
                         "look needs the engines in this process; set [evidence] "
                         "agreement = false (or --fixed-n)")
