"""What the runner records about provenance, and the contract checks around a load.

Every run embeds the environment snapshot and the shared libraries each engine
process actually mapped (with hashes); with ``--manifest FILE`` the manifest's
digest and path; with ``--contract FILE`` the contract, checked on the request before
the load (fail fast, nothing written) and on the effective configuration and the
mapped libraries after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.provenance import (
    ContractOutcome,
    check_effective,
    check_libraries,
    check_request,
    environment_snapshot,
    load_contract,
    load_manifest,
)
from abgate.provenance.libmaps import snapshot_pids
from abgate.redact import redact_argv
from abgate.runner.session import EngineSession, PreparedEngine


@dataclass(frozen=True)
class ProvenanceOptions:
    contract: str | None = None
    manifest: str | None = None


def check_before_load(opts: ProvenanceOptions, p: PreparedEngine,
                      exempt: Callable[[str], bool] | None = None) -> ContractOutcome | None:
    """Raise ContractViolation (exit 2: nothing loaded, nothing written) on a bad
    request; a manifest that cannot be read is refused here too, not after the load.
    ``exempt`` sets aside the clauses an A/B arm's declared switch breaks by design."""
    if opts.manifest is not None:
        load_manifest(opts.manifest)
    if opts.contract is None:
        return None
    outcome = ContractOutcome(load_contract(Path(opts.contract)), exempt=exempt)
    env = {**os.environ, **p.spec.env}
    outcome.record("request", check_request(outcome.contract, p.spec.engine, p.spec.args, env))
    outcome.raise_if_violated()
    return outcome


def record_after_load(opts: ProvenanceOptions, outcome: ContractOutcome | None,
                      session: EngineSession, doc: dict[str, Any]) -> None:
    """Embed provenance into ``doc``: the environment as the engine saw it (with its
    env overrides), the libraries its own processes mapped (``session.processes``
    only: never abgate's process beside a launched server). Raise ContractViolation
    after recording it."""
    mappings = snapshot_pids(session.processes)
    with session.env():
        environment = environment_snapshot(session.prepared.spec.env)
    prov: dict[str, Any] = {
        "environment": environment,
        "libraries": [{**m.to_dict(), "cmdline": redact_argv(m.cmdline)} for m in mappings],
    }
    if opts.manifest is not None:
        manifest = load_manifest(opts.manifest)
        prov["manifest"] = {"path": str(Path(opts.manifest).resolve()),
                            "digest": manifest.get("digest")}
    if outcome is not None:
        info = session.info
        outcome.record("effective", check_effective(outcome.contract, info["name"],
                                                    info["effective_config"]))
        outcome.record("libraries", check_libraries(outcome.contract, mappings, Path.cwd()))
        prov["contract"] = {"path": str(Path(opts.contract or "").resolve()),
                            **outcome.to_dict()}
    doc["provenance"] = prov
    if outcome is not None:
        outcome.raise_if_violated()
