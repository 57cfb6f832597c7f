"""Source revisions as A/B arms: ``abgate ab FILE --rev BASE..HEAD`` or a ``[source]``
table. The baseline arm runs the base revision's build, the other arm the head's; each
revision is built once into abgate's cache (``provenance.builds``). An arm runs its
build through ``{build}`` in its config (a launch command such as
``{build}/venv/bin/python -m myengine --port {port}``); the arms' configs must be the
same templates, so the one declared difference is the source tree (any other is
refused, as in every A/B that declares its changes). docs/revisions.md.

```toml
[source]
repository = "."      # relative to the experiment file
base = "main"         # --rev BASE..HEAD overrides base and head
head = "HEAD"
build = "python -m venv {venv} && {venv}/bin/pip install ."
artifacts = "venv"
```
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic.dataclasses import dataclass as model

from abgate.ab.experiment import Experiment
from abgate.ab.file_tables import source_table
from abgate.ab.state import RunState
from abgate.ab.strategies import LocalSessions
from abgate.errors import AbgateError, UsageError
from abgate.identity import sha256_file
from abgate.provenance import builds
from abgate.records.sections import SourceBuild, SourceRecord
from abgate.runner.session import EngineSession
from abgate.runner.spec import RunConfig
from abgate.schema import FORBID, Str, validated
from abgate.tomlfile import read_toml

PLACEHOLDER = "{build}"
TEMPLATED = ("engine_args", "engine_options", "env")  # where {build} is filled in


@model(frozen=True, config=FORBID)
class SourceTable:
    """An experiment file's ``[source]`` table."""

    repository: Str = "."
    base: Str | None = None
    head: Str | None = None
    build: Str = ""
    artifacts: Str = "venv"


def read_source(path: Path | None, rev: str | None) -> SourceTable | None:
    """The experiment file's ``[source]`` with ``--rev`` over its revisions; None when
    neither is given. The repository is relative to the file."""
    doc = read_toml(path, "experiment file") if path is not None else None
    raw = source_table(doc.data) if doc is not None else None
    if raw is None and rev is None:
        return None
    table = validated(SourceTable, raw or {}, f"{path} [source]", doc=doc)
    if rev is not None:
        base, head = builds.parse_rev_range(rev)
        table = replace(table, base=base, head=head)
    if table.base is None or table.head is None:
        raise UsageError(f"{path} [source]: base and head are needed (the two revisions), "
                         "or --rev BASE..HEAD")
    repo = Path(table.repository)
    if path is not None and not repo.is_absolute():
        repo = path.parent / repo
    return replace(table, repository=str(repo))


def _build_keys(exp: Experiment, arm: str) -> list[str]:
    cfg = exp.arms[arm]
    return [f"{group}.{key}" for group in TEMPLATED
            for key, value in getattr(cfg, group).items()
            if isinstance(value, str) and PLACEHOLDER in value]


def check_templates(exp: Experiment) -> list[str]:
    """The keys that name ``{build}``; a UsageError when the experiment is not two arms
    of the same templates that run their build."""
    if len(exp.arms) != 2:
        raise UsageError(f"[source]: a revision A/B has two arms (the base revision's and "
                         f"the head's), this experiment has {len(exp.arms)}")
    head = exp.candidates[0]
    keys = _build_keys(exp, exp.baseline)
    if not keys:
        raise UsageError(f"[source]: no arm runs its build: name {PLACEHOLDER} in the arms' "
                         "launch command, e.g. engine_options = { launch = \"{build}/venv/"
                         "bin/python -m myengine --port {port}\" }")
    for key in sorted(set(keys) | set(_build_keys(exp, head))):
        group, name = key.split(".", 1)
        a = getattr(exp.arms[exp.baseline], group).get(name)
        b = getattr(exp.arms[head], group).get(name)
        if a != b:
            raise UsageError(f"[source]: {key} differs between arms {exp.baseline!r} and "
                             f"{head!r}: in a revision A/B the source tree is the one "
                             "difference, the arms' templates must be the same")
    return keys


def declared(exp: Experiment) -> Experiment:
    """``exp`` with the head arm declaring the keys that name its build (its only
    allowed difference; every other one is then refused)."""
    keys = check_templates(exp)
    head = exp.candidates[0]
    return replace(exp, changes={**exp.changes,
                                 head: (*exp.changes.get(head, ()), *keys)})


def _filled(exp: Experiment, arm: str, where: Path) -> RunConfig:
    cfg = exp.arms[arm]

    def fill(table: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v.replace(PLACEHOLDER, str(where)) if isinstance(v, str) else v
                for k, v in table.items()}

    return replace(cfg, engine_args=fill(cfg.engine_args),
                   engine_options=fill(cfg.engine_options), env=fill(cfg.env))


@dataclass(frozen=True)
class Revisions:
    """Both arms' builds and the experiment that runs them."""

    table: SourceTable
    builds: dict[str, builds.Build]  # arm -> its revision's build
    exp: Experiment  # {build} filled in per arm

    def record(self, out: Path) -> SourceRecord:
        """``ab.json``'s ``source``; each build's log copied to ``arms/<arm>/build.log``."""
        entries = {}
        for arm, b in self.builds.items():
            log = out / "arms" / arm / builds.LOG
            log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(b.directory / builds.LOG, log)
            entries[arm] = SourceBuild(**b.manifest.model_dump(), cached=b.cached,
                                       log=str(log.relative_to(out)),
                                       log_sha256=sha256_file(log))
        t = self.table
        return SourceRecord(repository=t.repository, base=t.base, head=t.head,
                            build=t.build, artifacts=t.artifacts, builds=entries)

    def sessions(self, state: RunState) -> RevisionSessions:
        return RevisionSessions(LocalSessions(state), self.builds, self.table.artifacts)


def build_arms(exp: Experiment, table: SourceTable) -> Revisions:
    """Both revisions resolved (a missing one refused before anything is built), then
    each built once (cached by tree), and ``{build}`` filled in per arm."""
    exp = declared(exp)
    builds.check_command(table.build)
    top = builds.repository(Path(table.repository))
    revs = {exp.baseline: str(table.base), exp.candidates[0]: str(table.head)}
    for rev in revs.values():
        builds.resolve(top, rev)
    made = {arm: builds.build_revision(top, rev, table.build, table.artifacts)
            for arm, rev in revs.items()}
    arms = {arm: _filled(exp, arm, made[arm].directory) for arm in exp.arms}
    return Revisions(table, made, replace(exp, arms=arms))


@dataclass(frozen=True)
class RevisionSessions:
    """The :class:`~abgate.ab.schedule.ArmSessions` of a revision A/B: before an arm
    loads, its build is checked to be the one recorded (its artifacts hashed again), so
    an arm never runs a build changed since the A/B started; then loaded locally."""

    local: LocalSessions
    builds: Mapping[str, builds.Build]
    artifacts: str

    def open(self, arm: str, stack: ExitStack, warm: bool = True) -> EngineSession:
        b = self.builds[arm]
        try:
            builds.check_artifacts(b, self.artifacts)
        except UsageError as exc:
            raise AbgateError(f"arm {arm!r}: {exc}") from None
        return self.local.open(arm, stack, warm)
