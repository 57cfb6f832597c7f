"""What the runner records about provenance, and the contract checks around a load.

Every run embeds the environment snapshot and the shared libraries each engine
process actually mapped (with hashes); with ``--manifest FILE`` the manifest's
digest and path, and whether it describes the source tree abgate runs from (a stale
manifest, made at another tree or with other uncommitted edits, or one of whose
libraries changed on disk since, is refused before the load unless
``allow_stale_manifest``, and then recorded as stale), and after the load, per engine
process and rank, which mapped libraries are the manifest's, which differ, which it does
not name (:mod:`abgate.provenance.manifest_libs`); with
``--contract FILE`` the contract, checked on the request before
the load (fail fast, nothing written) and on the effective configuration and the
mapped libraries after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.identity import sha256_file
from abgate.provenance import (
    ContractOutcome,
    check_effective,
    check_libraries,
    check_request,
    environment_snapshot,
    load_contract,
)
from abgate.provenance.gitinfo import git_state
from abgate.provenance.libmaps import snapshot_pids
from abgate.provenance.loading import read_manifest
from abgate.provenance.manifest_libs import match_processes, rehash_libraries
from abgate.provenance.manifest_model import Manifest
from abgate.records.documents import Loadable
from abgate.records.sections import GitState, ManifestFreshness, ManifestUse, Provenance
from abgate.redact import redact_argv
from abgate.runner.session import EngineSession, PreparedEngine


@dataclass(frozen=True)
class ProvenanceOptions:
    contract: str | None = None
    manifest: str | None = None
    allow_stale_manifest: bool = False
    # on a resume: continue although the git checkout changed (recorded under resumes)
    allow_source_change: bool = False


def manifest_freshness(manifest: Manifest | Mapping[str, Any], path: str) -> ManifestFreshness:
    """Whether ``manifest`` describes the checkout abgate runs from: its git tree, dirty
    flag and diff hash against this one's (the manifest file itself ignored), and every
    library it lists hashed again (git-ignored build outputs too: a rebuilt one is a
    difference, ``library PATH: sha256 OLD -> NEW``)."""
    manifest = Manifest.of(manifest)
    libs = rehash_libraries(manifest, Path.cwd())
    rehashed = len(manifest.libraries)
    want, recorded = manifest.source.git, manifest.source.git_state
    found = git_state(Path.cwd(), ignore=[Path(path)])
    if want is None or recorded is None or found is None:
        why = ("the manifest records no git state" if want is None
               else "abgate runs outside a git checkout")
        return ManifestFreshness(checked=bool(rehashed), stale=bool(libs), reason=why,
                                 differences=libs, libraries_rehashed=rehashed,
                                 library_differences=libs)
    diffs = [f"{k} {want.get(k)!r} -> {found.get(k)!r}"
             for k in ("tree", "dirty", "diff_sha256") if want.get(k) != found.get(k)]
    return ManifestFreshness(checked=True, stale=bool(diffs or libs),
                             manifest_commit=recorded.commit,
                             current_commit=GitState.model_validate(found).commit,
                             differences=diffs + libs, libraries_rehashed=rehashed,
                             library_differences=libs)


# The freshness found at the start, by manifest path: the record states what was checked
# before the load, not a tree the run's own output has since made dirty.
_FRESHNESS: dict[str, ManifestFreshness] = {}


def _check_manifest(opts: ProvenanceOptions) -> ManifestFreshness | None:
    if opts.manifest is None:
        return None
    fresh = manifest_freshness(read_manifest(opts.manifest), opts.manifest)
    _FRESHNESS[opts.manifest] = fresh
    if fresh.stale and not opts.allow_stale_manifest:
        where = (f"made at commit {str(fresh.manifest_commit)[:12]}, this checkout is at "
                 f"{str(fresh.current_commit)[:12]} " if fresh.compared_git else "")
        raise UsageError(f"--manifest {opts.manifest}: stale: {where}"
                         f"({'; '.join(fresh.differences)}); rebuild it with 'abgate "
                         "manifest build', or pass --allow-stale-manifest to record it as stale")
    return fresh


def input_hashes(opts: ProvenanceOptions) -> dict[str, str | None]:
    """The SHA-256 of each input file a start reads besides the spec (contract,
    manifest): recorded per start, compared on resume."""
    out: dict[str, str | None] = {}
    for name, path in (("contract", opts.contract), ("manifest", opts.manifest)):
        try:
            out[name] = sha256_file(Path(path)) if path is not None else None
        except OSError as exc:
            raise UsageError(f"--{name} {path}: cannot read ({exc.strerror or exc})") from None
    return out


def check_before_load(opts: ProvenanceOptions, p: PreparedEngine,
                      exempt: Callable[[str], bool] | None = None) -> ContractOutcome | None:
    """Raise ContractViolation (exit 2: nothing loaded, nothing written) on a bad
    request; a manifest that cannot be read (or is stale) is refused here too, not after
    the load. ``exempt`` sets aside the clauses an A/B arm's declared switch breaks by
    design."""
    _check_manifest(opts)
    if opts.contract is None:
        return None
    outcome = ContractOutcome(load_contract(Path(opts.contract)), exempt=exempt)
    env = {**os.environ, **p.spec.env}
    outcome.record("request", check_request(outcome.contract, p.spec.engine, p.spec.args, env))
    outcome.raise_if_violated()
    return outcome


def record_after_load(opts: ProvenanceOptions, outcome: ContractOutcome | None,
                      session: EngineSession, doc: Loadable) -> None:
    """Embed provenance into ``doc``: the environment as the engine saw it (with its
    env overrides), the libraries its own processes mapped (``session.processes``
    only: never abgate's process beside a launched server). Raise ContractViolation
    after recording it."""
    mappings = snapshot_pids(session.processes)
    with session.env():
        environment = environment_snapshot(session.prepared.spec.env)
    prov = Provenance(environment=environment,
                      libraries=[m.record(redact_argv(m.cmdline)) for m in mappings])
    if opts.manifest is not None:
        manifest = read_manifest(opts.manifest)
        fresh = _FRESHNESS.get(opts.manifest) or manifest_freshness(manifest, opts.manifest)
        prov.manifest = ManifestUse(path=str(Path(opts.manifest).resolve()),
                                    digest=manifest.digest, stale=fresh.stale,
                                    freshness=fresh,
                                    processes=match_processes(manifest, Path.cwd(), mappings))
    if outcome is not None:
        info = session.described
        outcome.record("effective", check_effective(outcome.contract, info.name,
                                                    info.effective_config))
        outcome.record("libraries", check_libraries(outcome.contract, mappings, Path.cwd()))
        prov.contract = outcome.recorded(str(Path(opts.contract or "").resolve()))
    doc.provenance = prov
    if outcome is not None:
        outcome.raise_if_violated()
