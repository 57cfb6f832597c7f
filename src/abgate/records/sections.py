"""The typed sections record documents share: the base model every record and section
is made of, the source tree, the host, the engine as loaded, the spec, provenance, and
an A/B's per-candidate differences.

Every section keeps the keys it does not name (``extra="allow"``), so a newer minor
version's fields survive a read and a rewrite. A field whose default is None is an
*optional section*: written when the file had it or a writer set it (even to None),
left out otherwise, so a document read and written again has the keys it had. Numbers
that may be written as integers are typed ``int | float`` (an integer stays one).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

Number = int | float


class Section(BaseModel):
    """A typed part of a record: unknown keys kept, assignments validated (a dict
    assigned to a section field becomes that section), optional sections written only
    when set."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    @model_serializer(mode="wrap")
    def _keys_as_read(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, info in type(self).model_fields.items():
            if info.default is None and name not in self.model_fields_set:
                data.pop(name, None)
        return data

    def to_dict(self) -> dict[str, Any]:
        """The JSON object this section is written as."""
        out: dict[str, Any] = self.model_dump(mode="json")
        return out


class GitState(Section):
    """The ``git`` facts of a source tree (``provenance.gitinfo.git_state``)."""

    commit: str | None = None
    tree: str | None = None
    dirty: bool | None = None
    diff_sha256: str | None = None


class HostInfo(Section):
    """``abgate.host.host_info()`` as recorded."""

    hostname: str | None = None
    os: str | None = None
    python: str | None = None
    cpu: str | None = None
    cores_logical: int | None = None
    affinity: int | None = None
    ram_bytes: int | None = None
    gpus: list[Any] | None = None


class CapabilitiesRecord(Section):
    """What an engine can do beyond generating, as recorded: the scoring method of
    ``engines.base.Capabilities``."""

    scoring: str | None = None  # "full", "top_k" or None: it cannot score sequences


class EngineRecord(Section):
    """``Engine.describe()`` as recorded. ``effective_config`` is the engine's own
    (its keys differ by engine): a free object."""

    name: str
    version: str | None = None
    model: str | None = None
    effective_config: dict[str, Any]
    capabilities: CapabilitiesRecord


class ModelRef(Section):
    """A spec's ``model``: what identifies it (``identity.identify_model``), in the order
    a record writes it (path and hash first): a file's SHA-256 and size; a directory's
    every file and one digest over them; a name's (a hub id a server resolves) no hash,
    and a note saying so."""

    path: str | None = None
    sha256: str | None = None
    kind: str | None = None  # "file", "directory" or "name"
    size: int | None = None
    files: list[dict[str, Any]] | None = None  # a directory's: path, size, sha256 each
    note: str | None = None


class SuiteRef(Section):
    name: str | None = None
    source: str | None = None
    data_sha256: str | None = None
    n_available: int | None = None


class PromptSpec(Section):
    version: str | None = None
    shots: int | None = None
    shots_file: str | None = None
    system: str | None = None
    instruction: str | None = None


class Spec(Section):
    """A prepared run's (or bench's) spec: what the run is, before any load."""

    engine: str | None = None
    model: ModelRef | None = None
    engine_args: dict[str, Any] | None = None
    engine_options: dict[str, Any] | None = None
    resolved_engine_args: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    suite: SuiteRef | None = None
    item_ids: list[str] | None = None
    seeds: list[int] | None = None
    sampling: dict[str, Any] | None = None
    prompt: PromptSpec | None = None


class MappedLibRecord(Section):
    path: str
    sha256: str | None = None
    size: int | None = None
    deleted: bool | None = None


class MappedProcess(Section):
    """One engine process's mapped libraries (``provenance.libmaps.WorkerMapping.record``),
    then what the process is."""

    libs: list[MappedLibRecord] = []
    pid: int | None = None
    name: str | None = None
    cmdline: list[str] | None = None
    role: str | None = None
    rank: str | None = None
    error: str | None = None


class ContractFinding(Section):
    """A contract clause that did not hold (``provenance.contract.Violation.finding``)."""

    clause: str | None = None
    message: str | None = None
    expected: Any = None
    actual: Any = None
    stage: str | None = None
    note: str | None = None


class ContractName(Section):
    name: str | None = None


class ContractRecord(Section):
    """A contract's outcome as recorded under ``provenance.contract``."""

    path: str | None = None
    passed: bool | None = None
    contract: ContractName | None = None
    violations: list[ContractFinding] = []
    exempted: list[ContractFinding] = []
    checked: list[Any] = []


class DifferedLib(Section):
    """A mapped library the manifest names by basename, but another copy or build."""

    path: str
    sha256: str | None = None
    manifest_path: str
    manifest_sha256: str
    why: str


class ProcessMatch(Section):
    """One engine process's mapped libraries against the manifest
    (``provenance.manifest_libs.match_processes``)."""

    pid: int
    role: str
    rank: str | None = None
    matched: list[str]
    differed: list[DifferedLib]
    not_mapped: list[str]
    unnamed: list[str]
    error: str | None = None


class ManifestFreshness(Section):
    """Whether a ``--manifest`` describes the checkout abgate runs from
    (``runner.provenance.manifest_freshness``): ``reason`` when the git state could not
    be compared, the two commits when it was."""

    checked: bool
    stale: bool
    reason: str | None = None
    manifest_commit: str | None = None
    current_commit: str | None = None
    differences: list[str]
    libraries_rehashed: int
    library_differences: list[str]

    @property
    def compared_git(self) -> bool:
        return "manifest_commit" in self.model_fields_set


class ManifestUse(Section):
    """``provenance.manifest``: the ``--manifest`` a run was checked against, whether it
    was fresh, and each engine process's libraries against it."""

    path: str
    digest: str
    stale: bool
    freshness: ManifestFreshness
    processes: list[ProcessMatch]


class Provenance(Section):
    """The environment as the engine saw it, its processes' mapped libraries, the
    manifest and the contract (``runner.provenance.record_after_load``)."""

    environment: dict[str, Any] | None = None
    libraries: list[MappedProcess] | None = None
    manifest: ManifestUse | None = None
    contract: ContractRecord | None = None


class Resume(Section):
    at: float
    from_status: str | None = None
    git: GitState | None = None
    inputs: dict[str, str | None] | None = None
    source_changed: str | None = None
    engine: EngineRecord | None = None


class DiffStage(Section):
    """One stage (``request``, ``loaded``) of a candidate's differences from the
    baseline: key -> [baseline value, candidate value], declared and undeclared apart."""

    patterns: list[str] = []
    declared: dict[str, list[str]] = {}
    undeclared: dict[str, list[str]] = {}
    # figures that move between two loads of one build (compare.drift.VOLATILE): shown,
    # never a difference (written only when some differ)
    volatile: dict[str, list[str]] | None = None


class OptOutLines(Section):
    baseline: list[str] = []
    candidate: list[str] = []


class OptOut(Section):
    """Evidence that an env-only switch took effect (``ab.optout``)."""

    env: list[str] = []
    reported: list[str] = []
    log_patterns: list[str] = []
    log_lines: OptOutLines = OptOutLines()
    observed: bool = False
    warning: str | None


class ArmDifferences(Section):
    """An ``ab.json`` ``differences`` entry (see ``abgate.ab.declared``)."""

    declares: bool | None = None
    request: DiffStage | None = None
    loaded: DiffStage | None = None
    unobserved: list[str] | None = None
    opt_out: OptOut | None = None
    unchanged: list[str] | None = None  # engine args after which nothing differs (no-op)
    # engine args after which only the model config's digest differs (nothing else the
    # engine reports): the analysis warns when the outputs are identical too
    config_only: list[str] | None = None


class SourceBuild(Section):
    """One revision's build in a revision A/B (``provenance.builds.BuildManifest`` and how
    this A/B got it): ``cached`` when an earlier run built it and this one built nothing;
    ``log`` is the build's log copied into the A/B directory."""

    revision: str
    commit: str
    tree: str
    command: str
    directory: str
    duration_s: float
    artifacts_digest: str
    artifacts: dict[str, str]
    cached: bool
    log: str
    log_sha256: str


class SourceRecord(Section):
    """``ab.json``'s ``source`` (a revision A/B, ``abgate.ab.revisions``): the repository,
    the two revisions, the build command and each arm's build."""

    repository: str
    base: str | None
    head: str | None
    build: str
    artifacts: str
    builds: dict[str, SourceBuild]


class Distribution(Section):
    """``abgate.metrics.distribution``: n, and the statistics of the defined values
    (in the order it writes them)."""

    n: int = 0
    mean: float | None = None
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None
    cv: float | None = None


class HealthCounts(Section):
    """``quality.counts`` (``scoring.health.health_counts``): the counts behind the rates,
    the suspicious characters apart (None where a sample predates the field)."""

    n_live: int | None = None
    n_scored: int | None = None
    n_correct: int | None = None
    n_invalid: int | None = None
    n_truncated: int | None = None
    n_natural_stop: int | None = None
    replacement_chars: int | None = None
    n_with_replacement_chars: int | None = None
    nul_chars: int | None = None
    n_with_nul_chars: int | None = None
    other_control_chars: int | None = None


class Outlier(Section):
    """One of ``quality.outliers`` (``scoring.health.find_outliers``): a sample a reviewer
    should look at, and why."""

    item_id: str | None = None
    seed: int | None = None
    output_tokens: int | None = None
    seq_rep_4: Number | None = None
    correct: bool | None = None
    why: str | None = None


class QualitySummary(Section):
    """``summary.json``'s ``quality`` (``scoring.health.aggregate_health``), its fields
    in the order it is written."""

    n: int | None = None
    n_error: int | None = None
    accuracy: float | None = None
    accuracy_se: float | None = None
    mean_seq_rep_4: float | None = None
    mean_output_tokens: float | None = None
    n_items: int | None = None
    counts: HealthCounts | None = None
    n_scored: int | None = None
    error_rate: Number | None = None
    invalid_rate: Number | None = None
    invalid_reasons: dict[str, int] | None = None
    truncated_rate: Number | None = None
    natural_stop_rate: Number | None = None
    empty_rate: Number | None = None
    replacement_char_rate: Number | None = None
    control_char_rate: Number | None = None
    median_seq_rep_4: Number | None = None
    median_output_tokens: Number | None = None
    outliers: list[Outlier] | None = None
