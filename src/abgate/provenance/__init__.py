"""Provenance: what exactly was measured, and can it be shown to be the same again.

* :func:`build_manifest` / :func:`read_manifest` / :func:`verify_manifest`: hashes of
  the source tree, native libraries and model files, plus the environment, sealed by
  a digest over canonical JSON.
* :func:`environment_snapshot`: the cheap environment part, for every run record.
* :func:`snapshot_tree` / :func:`check_required`: shared libraries each engine
  process and worker actually mapped.
* :func:`load_contract` and the ``check_*`` functions: run contracts.
* :func:`attach`: carry results to another commit with an identical tree.
"""

from __future__ import annotations

from abgate.provenance.attach import Attachment, AttachRefused, attach
from abgate.provenance.contract import (
    Contract,
    ContractOutcome,
    ContractViolation,
    Violation,
    check_effective,
    check_libraries,
    check_request,
    load_contract,
)
from abgate.provenance.environment import environment_snapshot
from abgate.provenance.libmaps import (
    MappingIssue,
    RequiredLib,
    WorkerMapping,
    check_required,
    required_from_manifest,
    snapshot_pids,
    snapshot_tree,
)
from abgate.provenance.loading import ManifestError, read_manifest
from abgate.provenance.manifest import (
    SCHEMA_VERSION,
    BuildOptions,
    build_manifest,
    content_digest,
    write_manifest,
)
from abgate.provenance.verify import ManifestVerifyReport, verify_file, verify_manifest

__all__ = [
    "SCHEMA_VERSION",
    "AttachRefused",
    "Attachment",
    "BuildOptions",
    "Contract",
    "ContractOutcome",
    "ContractViolation",
    "ManifestError",
    "MappingIssue",
    "RequiredLib",
    "ManifestVerifyReport",
    "Violation",
    "WorkerMapping",
    "attach",
    "build_manifest",
    "check_effective",
    "check_libraries",
    "check_request",
    "check_required",
    "content_digest",
    "environment_snapshot",
    "load_contract",
    "read_manifest",
    "required_from_manifest",
    "snapshot_pids",
    "snapshot_tree",
    "verify_file",
    "verify_manifest",
    "write_manifest",
]
