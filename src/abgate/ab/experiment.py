"""The A/B experiment file: shared settings plus two or more named arms.

```toml
name = "kv-q8"
baseline = "f16"             # optional; default: the first arm
expect = "lossy"             # optional; "lossless" for switches that must not change
                             # numerics (the policy's [lossless] limits then apply)

[shared]                     # any RunConfig field
suite = "synthetic"
difficulty = "medium"
limit = 24
seeds = [0]
max_tokens = 256

[schedule]
mode = "auto"                # auto | interleave | blocks
warmup = 2                   # per arm (per load in blocks mode), excluded from statistics
block_size = 8               # items per block in blocks mode
stopping = "fixed"           # fixed (every item) | sequential (stop as soon as the
                             # verdict is certain: anytime-valid gates, docs/statistics.md)
# max_items = 200            # sequential: at most this many items (default: all)
# look_every = 1             # sequential: evaluate every gate after every k items

[evidence]                   # optional; beyond the samples, per arm
agreement = true             # teacher-forced distribution agreement with the baseline
agreement_tokens = 64        # output tokens scored per sample (0: all of them)
probes = true                # health probes (arithmetic, copy, mid-context retrieval)
probe_len = 512              # retrieval probe context in tokens
weights = false              # read each arm's weights after load: weights-diff-<arm>.json

[arms.f16]
[arms.q8]
engine_args = { flash_attn = true, type_k = "q8_0", type_v = "q8_0" }
```

An arm may override ``engine``, ``model``, ``engine_args`` (merged over the shared
ones), ``engine_options`` (merged) and ``env`` (merged), and declare what it changes
(``changes = ["flash_attn", "type_k", "type_v"]``); ``allow_differences = ["env.*"]`` at
the top allows whole classes for every arm. Once anything is declared, an undeclared
difference is refused (``abgate.ab.declared``). ``contract = "FILE"`` at the top holds
every arm to a contract (as ``--contract`` does; the flag wins). Everything that decides
*what* is asked (items, seeds, sampling, prompt) is shared by construction, and
checked again after preparation.

The file's tables and the experiment itself are pydantic models (``abgate.schema``):
an experiment made from a file, from flags or from a record (``--resume``) is checked
by the same types, ranges and cross-checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic.dataclasses import dataclass

from abgate.ab import file_tables as tables
from abgate.ab.optout import compile_patterns
from abgate.ab.suite_table import SuiteTable
from abgate.compare.policy import shipped_name
from abgate.errors import UsageError, did_you_mean
from abgate.records.facts import check_patterns
from abgate.runner.spec import RunConfig
from abgate.schema import (
    FORBID,
    LISTED,
    TEXT,
    Bool,
    Int,
    Str,
    StrList,
    StrTable,
    Table,
    built,
    refuse,
    validated,
)
from abgate.tomlfile import TomlDoc, read_toml

MERGED = ("engine_args", "engine_options", "env")  # an arm's tables merge over [shared]'s
# An arm's name is a directory (arms/<arm>/) and part of file names: a safe identifier.
ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

Expect = Annotated[Literal["lossy", "lossless"], TEXT]
AtLeast0 = Annotated[Int, Field(ge=0)]
AtLeast1 = Annotated[Int, Field(ge=1)]


def check_arm_name(where: str, name: object) -> str:
    """``name`` if it is a safe arm name (it becomes ``arms/<name>/``), else a UsageError
    before anything is written."""
    if not isinstance(name, str) or not ARM_NAME.fullmatch(name):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise UsageError(f"{where}: arm name {shown} is not allowed: an arm name is 1-64 "
                         "characters of letters, digits, '.', '_' and '-', starting with a "
                         "letter or digit (it names the directory arms/<arm>/)")
    return name


@dataclass(frozen=True, config=FORBID)
class Schedule:
    mode: Annotated[Literal["auto", "interleave", "blocks"], TEXT] = "auto"
    warmup: AtLeast0 = 2
    block_size: AtLeast1 = 8
    stopping: Annotated[Literal["fixed", "sequential"], TEXT] = "fixed"
    max_items: AtLeast1 | None = None  # sequential: the most items run (None: all)
    look_every: AtLeast1 = 1  # sequential: items between looks

    @model_validator(mode="after")
    def _sequential_keys(self) -> Schedule:
        if not self.sequential and (self.max_items is not None or self.look_every != 1):
            raise refuse("max_items and look_every apply only with stopping = "
                         "\"sequential\"",
                         "max_items" if self.max_items is not None else "look_every")
        return self

    @property
    def sequential(self) -> bool:
        return self.stopping == "sequential"

    def to_dict(self) -> dict[str, Any]:
        """The sequential keys only when sequential, so the digest of an experiment
        recorded before they existed stays the same (``--resume``)."""
        out: dict[str, Any] = {"mode": self.mode, "warmup": self.warmup,
                               "block_size": self.block_size}
        if self.sequential:
            out |= {"stopping": self.stopping, "max_items": self.max_items,
                    "look_every": self.look_every}
        return out


def _lengths(value: Any) -> Any:
    """``input_len = 512`` is one length; a list is several."""
    return (value,) if isinstance(value, int) and not isinstance(value, bool) else value


@dataclass(frozen=True, config=FORBID)
class ArmBenchPlan:
    """Fixed-length speed cases run for every arm after the quality samples."""

    input_len: Annotated[tuple[AtLeast1, ...], LISTED, BeforeValidator(_lengths)] = ()
    output_len: AtLeast1 = 128
    repeats: AtLeast1 = 3
    warmup: AtLeast0 = 1


@dataclass(frozen=True, config=FORBID)
class Evidence:
    """Quality evidence gathered per arm besides the samples."""

    agreement: Bool = True
    agreement_tokens: AtLeast0 = 64  # the first N output tokens of each sample; 0: all
    probes: Bool = True
    probe_len: Annotated[Int, Field(ge=64)] = 512  # tokens
    log_patterns: StrList = ()  # engine log lines recorded as opt-out evidence
    weights: Bool = False  # each arm's loaded weights diffed against the baseline's

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in vars(self).items()
                               if k not in ("log_patterns", "weights")}
        if self.log_patterns:  # only when set: older digests stay the same
            out["log_patterns"] = list(self.log_patterns)
        if self.weights:
            out["weights"] = True
        return out


@dataclass(frozen=True, config=FORBID)
class Experiment:
    """An A/B as run and as recorded (``to_dict``/``from_dict``): the same model checks
    an experiment made from a file, from flags and from a record."""

    name: Str
    arms: dict[str, RunConfig]  # in file order
    baseline: Str
    schedule: Schedule = field(default_factory=Schedule)
    policy: Str | None = None
    bench: ArmBenchPlan = field(default_factory=ArmBenchPlan)
    description: Str = ""
    expect: Expect = "lossy"
    evidence: Evidence = field(default_factory=Evidence)
    changes: dict[str, StrList] = field(default_factory=dict)  # arm -> patterns
    allow_differences: StrList = ()
    contract: Str | None = None  # a contract TOML every arm is held to (--contract wins)
    suites: dict[str, SuiteTable] = field(default_factory=dict)  # several suites, one verdict

    @model_validator(mode="after")
    def _arms_and_baseline(self) -> Experiment:
        if len(self.arms) < 2:
            raise refuse("an experiment needs at least two [arms.NAME] tables")
        if self.baseline not in self.arms:
            raise refuse(f"baseline {self.baseline!r} is not an arm"
                         + did_you_mean(self.baseline, self.arms), "baseline")
        if self.suites and self.schedule.sequential:
            raise refuse("[suites] with stopping = \"sequential\" is not supported: the "
                         "suites' one verdict is a fixed-N Holm family", "suites")
        return self

    def __post_init__(self) -> None:
        for arm in self.arms:  # every way an experiment is made: file, flags, record
            check_arm_name(f"experiment {self.name!r}", arm)
        for suite in self.suites:  # a suite's name is a directory too (suites/<name>/)
            check_arm_name(f"experiment {self.name!r} [suites]", suite)

    @property
    def declares(self) -> bool:
        """Whether any difference is declared (then undeclared ones are refused)."""
        return bool(self.allow_differences) or any(self.changes.values())

    def declared_for(self, arm: str) -> tuple[str, ...]:
        """The patterns ``arm`` may differ from the baseline in."""
        return (*self.changes.get(arm, ()), *self.changes.get(self.baseline, ()),
                *self.allow_differences)

    @property
    def candidates(self) -> list[str]:
        return [a for a in self.arms if a != self.baseline]

    @classmethod
    def from_dict(cls, d: Any, where: str = "experiment") -> Experiment:
        """The inverse of :meth:`to_dict` (how ``--resume`` finds the experiment),
        through the same model and checks as a file (its patterns checked on the model);
        a damaged or out-of-range record is a one-line UsageError naming ``where``."""
        exp = validated(cls, d, where)
        _check_declared(where, {arm: list(p) for arm, p in exp.changes.items()},
                        list(exp.allow_differences), list(exp.evidence.log_patterns))
        return exp

    def _head(self) -> dict[str, Any]:
        """What the as-given and the resolved experiment share first: name, description,
        baseline and every arm (as its config records it)."""
        return {"name": self.name, "description": self.description,
                "baseline": self.baseline,
                "arms": {k: v.to_dict() for k, v in self.arms.items()}}

    def _bench_dict(self) -> dict[str, Any]:
        return {**vars(self.bench), "input_len": list(self.bench.input_len)}

    def _suites_dict(self) -> dict[str, Any]:
        return {k: v.to_dict() for k, v in self.suites.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``expect`` only when not the default "lossy", so the digest of
        an experiment recorded before the key existed stays the same (``--resume``)."""
        out: dict[str, Any] = {**self._head(), "schedule": self.schedule.to_dict(),
                               "policy": self.policy, "bench": self._bench_dict()}
        if self.expect != "lossy":
            out["expect"] = self.expect
        if self.evidence != Evidence():
            out["evidence"] = self.evidence.to_dict()
        if any(self.changes.values()):
            out["changes"] = {k: list(v) for k, v in self.changes.items() if v}
        if self.allow_differences:
            out["allow_differences"] = list(self.allow_differences)
        if self.contract is not None:
            out["contract"] = self.contract
        if self.suites:
            out["suites"] = self._suites_dict()
        return out

    def resolved(self, policy_name: str | None = None) -> dict[str, Any]:
        """Every field as the A/B runs it, defaults included (ab.json's
        ``experiment_resolved``, beside the as-given :meth:`to_dict` whose digest
        ``--resume`` compares); ``policy_name``: the policy it decides under."""
        return {
            **self._head(), "schedule": dict(vars(self.schedule)), "policy": self.policy,
            "policy_name": policy_name, "bench": self._bench_dict(), "expect": self.expect,
            "evidence": {**vars(self.evidence),
                         "log_patterns": list(self.evidence.log_patterns)},
            "changes": {arm: list(self.changes.get(arm, ())) for arm in self.arms},
            "allow_differences": list(self.allow_differences), "contract": self.contract,
            "suites": self._suites_dict()}



def _check_declared(where: str, changes: Any, allow: Any, log_patterns: Any) -> None:
    """The key patterns (``changes``, ``allow_differences``) and ``log_patterns``, in
    their own one-line errors (shared by a file and a record)."""
    if not isinstance(changes, Mapping):
        raise UsageError(f"{where}: 'changes' must be a table of arm -> patterns, got "
                         f"{changes!r}")
    for arm, patterns in changes.items():
        check_patterns(f"{where} [arms.{arm}] changes", patterns)
    if allow is not None:
        check_patterns(f"{where} allow_differences", allow)
    if log_patterns is not None:
        compile_patterns(f"{where} [evidence]", log_patterns)


@dataclass(frozen=True, config=FORBID)
class ArmTable:
    """An ``[arms.NAME]`` table: what an arm overrides (``changes``: see declared.py)."""

    engine: Str | None = None
    model: Str | None = None
    engine_args: Table = field(default_factory=dict)
    engine_options: Table = field(default_factory=dict)
    env: StrTable = field(default_factory=dict)
    changes: Any = None


@dataclass(frozen=True, config=FORBID)
class ExperimentFile:
    """An experiment file's top level, as written (arms not yet merged over shared)."""

    name: Str = "ab"
    description: Str = ""
    baseline: Str | None = None
    shared: RunConfig = field(default_factory=RunConfig)
    schedule: Schedule = field(default_factory=Schedule)
    arms: dict[str, ArmTable] = field(default_factory=dict)
    policy: Str | None = None
    bench: ArmBenchPlan = field(default_factory=ArmBenchPlan)
    expect: Expect = "lossy"
    evidence: Evidence = field(default_factory=Evidence)
    allow_differences: StrList = ()
    contract: Str | None = None
    suites: dict[str, SuiteTable] = field(default_factory=dict)
    # where it runs (abgate.fleet.cluster); not part of the experiment or its digest
    cluster: dict[str, Any] = field(default_factory=dict)
    # the source revisions the arms run (abgate.ab.revisions); read there
    source: dict[str, Any] = field(default_factory=dict)


def arm_config(shared: RunConfig, arm: Mapping[str, Any]) -> RunConfig:
    """An arm's config: its tables merged over the shared ones, the rest replaced."""
    updates: dict[str, Any] = {key: {**getattr(shared, key), **value} if key in MERGED else value
               for key, value in arm.items() if key != "changes"}
    return replace(shared, **updates)


def parse_experiment(data: Mapping[str, Any], where: str, doc: TomlDoc | None = None
                     ) -> Experiment:
    """An experiment from a file's tables (``doc``: the file, for its lines)."""
    arms_table = tables.arms_table(data)
    if not isinstance(arms_table, Mapping) or len(arms_table) < 2:
        raise UsageError(f"{where}: an experiment needs at least two [arms.NAME] tables")
    for name in arms_table:
        check_arm_name(where, name)
    _check_declared(where, tables.declared_changes(arms_table),
                    tables.allow_differences(data), tables.log_patterns(data))
    f = validated(ExperimentFile, data, where, doc=doc)
    return built(Experiment, where, dict(
        name=f.name, description=f.description,
        arms={name: arm_config(f.shared, t) for name, t in arms_table.items()},
        baseline=f.baseline if f.baseline is not None else next(iter(arms_table)),
        changes={n: tuple(a.changes) for n, a in f.arms.items() if a.changes},
        allow_differences=f.allow_differences, contract=f.contract, schedule=f.schedule,
        policy=f.policy, bench=f.bench, expect=f.expect, evidence=f.evidence,
        suites=f.suites), doc)


def load_experiment(path: Path) -> Experiment:
    doc = read_toml(path, "experiment file")
    exp = parse_experiment(doc.data, str(path), doc)
    if exp.policy is not None and not Path(exp.policy).is_absolute() and not (
            shipped_name(exp.policy) and not (path.parent / exp.policy).exists()):
        exp = replace(exp, policy=str(path.parent / exp.policy))
    if exp.contract is not None and not Path(exp.contract).is_absolute():
        exp = replace(exp, contract=str(path.parent / exp.contract))
    if exp.suites:
        exp = replace(exp, suites={n: _relative_suite(path, t) for n, t in exp.suites.items()})
    for name, cfg in exp.arms.items():  # relative paths in the file are relative to it
        fixed: dict[str, Any] = {k: str(path.parent / v) for k in ("model", "data", "shots_file")
                 if (v := getattr(cfg, k)) and not Path(v).is_absolute()
                 and not v.startswith("hf:") and (path.parent / v).exists()}
        if fixed:
            exp.arms[name] = replace(cfg, **fixed)
    return exp


def _relative_suite(path: Path, table: SuiteTable) -> SuiteTable:
    """A suite's ``data`` and ``policy`` paths, relative to the experiment file."""
    fixed: dict[str, Any] = {}
    if table.data and not Path(table.data).is_absolute() and not table.data.startswith(
            "hf:") and (path.parent / table.data).exists():
        fixed["data"] = str(path.parent / table.data)
    if table.policy is not None and not Path(table.policy).is_absolute() and not (
            shipped_name(table.policy) and not (path.parent / table.policy).exists()):
        fixed["policy"] = str(path.parent / table.policy)
    return replace(table, **fixed) if fixed else table
