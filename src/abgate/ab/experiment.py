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
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abgate.ab.declared import check_patterns
from abgate.ab.optout import compile_patterns
from abgate.compare.policy import shipped_name
from abgate.errors import UsageError, did_you_mean, one_line
from abgate.runner.spec import RunConfig

ARM_KEYS = ("engine", "model", "engine_args", "engine_options", "env", "changes")
MERGED = ("engine_args", "engine_options", "env")
SCHEDULE_MODES = ("auto", "interleave", "blocks")
TOP_KEYS = ("name", "description", "baseline", "shared", "schedule", "arms", "policy", "bench",
            "expect", "evidence", "allow_differences", "contract")
EVIDENCE_KEYS = ("agreement", "agreement_tokens", "probes", "probe_len", "log_patterns")
EXPECTS = ("lossy", "lossless")
SCHEDULE_KEYS = ("mode", "warmup", "block_size", "stopping", "max_items", "look_every")
STOPPINGS = ("fixed", "sequential")
BENCH_KEYS = ("input_len", "output_len", "repeats", "warmup")
# An arm's name is a directory (arms/<arm>/) and part of file names: a safe identifier.
ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_arm_name(where: str, name: object) -> str:
    """``name`` if it is a safe arm name (it becomes ``arms/<name>/``), else a UsageError
    before anything is written."""
    if not isinstance(name, str) or not ARM_NAME.fullmatch(name):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise UsageError(f"{where}: arm name {shown} is not allowed: an arm name is 1-64 "
                         "characters of letters, digits, '.', '_' and '-', starting with a "
                         "letter or digit (it names the directory arms/<arm>/)")
    return name


@dataclass(frozen=True)
class Schedule:
    mode: str = "auto"
    warmup: int = 2
    block_size: int = 8
    stopping: str = "fixed"
    max_items: int | None = None  # sequential: the most items run (None: all)
    look_every: int = 1  # sequential: items between looks

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


@dataclass(frozen=True)
class BenchPlan:
    """Fixed-length speed cases run for every arm after the quality samples."""

    input_len: tuple[int, ...] = ()
    output_len: int = 128
    repeats: int = 3
    warmup: int = 1


@dataclass(frozen=True)
class Evidence:
    """Quality evidence gathered per arm besides the samples."""

    agreement: bool = True
    agreement_tokens: int = 64  # the first N output tokens of each sample are scored; 0: all
    probes: bool = True
    probe_len: int = 512
    log_patterns: tuple[str, ...] = ()  # engine log lines recorded as opt-out evidence

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in vars(self).items() if k != "log_patterns"}
        if self.log_patterns:  # only when set: older digests stay the same
            out["log_patterns"] = list(self.log_patterns)
        return out


@dataclass(frozen=True)
class Experiment:
    name: str
    arms: dict[str, RunConfig]  # in file order
    baseline: str
    schedule: Schedule = field(default_factory=Schedule)
    policy: str | None = None
    bench: BenchPlan = field(default_factory=BenchPlan)
    description: str = ""
    expect: str = "lossy"
    evidence: Evidence = field(default_factory=Evidence)
    changes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # arm -> patterns
    allow_differences: tuple[str, ...] = ()
    contract: str | None = None  # a contract TOML every arm is held to (--contract wins)

    @property
    def declares(self) -> bool:
        """Whether any difference is declared (then undeclared ones are refused)."""
        return bool(self.allow_differences) or any(self.changes.values())

    def declared_for(self, arm: str) -> tuple[str, ...]:
        """The patterns ``arm`` may differ from the baseline in."""
        return (*self.changes.get(arm, ()), *self.changes.get(self.baseline, ()),
                *self.allow_differences)

    def __post_init__(self) -> None:
        for arm in self.arms:  # every way an experiment is made: file, flags, record
            check_arm_name(f"experiment {self.name!r}", arm)

    @property
    def candidates(self) -> list[str]:
        return [a for a in self.arms if a != self.baseline]

    @classmethod
    def from_dict(cls, d: Any, where: str = "experiment") -> Experiment:
        """The inverse of :meth:`to_dict` (how ``--resume`` finds the experiment); a
        damaged record is a one-line UsageError naming ``where``."""
        try:
            bench = dict(d.get("bench") or {})
            bench["input_len"] = tuple(bench.get("input_len", ()))
            return cls(name=d["name"], description=d.get("description", ""),
                       baseline=d["baseline"],
                       arms={k: RunConfig.from_dict(v, f"{where}.arms.{k}")
                             for k, v in d["arms"].items()},
                       schedule=Schedule(**d["schedule"]), policy=d.get("policy"),
                       bench=BenchPlan(**bench), expect=d.get("expect", "lossy"),
                       evidence=Evidence(**{**d.get("evidence", {}), "log_patterns": tuple(
                           (d.get("evidence") or {}).get("log_patterns") or ())}),
                       changes={k: tuple(v) for k, v in (d.get("changes") or {}).items()},
                       allow_differences=tuple(d.get("allow_differences") or ()),
                       contract=d.get("contract"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: cannot be read back ({type(exc).__name__}: "
                             f"{one_line(exc)})") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``expect`` only when not the default "lossy", so the digest of
        an experiment recorded before the key existed stays the same (``--resume``)."""
        out: dict[str, Any] = {
               "name": self.name, "description": self.description, "baseline": self.baseline,
               "arms": {k: v.to_dict() for k, v in self.arms.items()},
               "schedule": self.schedule.to_dict(), "policy": self.policy,
               "bench": {**vars(self.bench), "input_len": list(self.bench.input_len)}}
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
        return out


def _check_keys(where: str, table: Mapping[str, Any], allowed: tuple[str, ...] | list[str]
                ) -> None:
    for key in table:
        if key not in allowed:
            raise UsageError(f"{where}: unknown key {key!r}" + did_you_mean(key, allowed))


def _typed(where: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UsageError(f"{where}: {key!r} must be {name}, got {value!r}")
    return value


def shared_config(where: str, shared: Any) -> RunConfig:
    """A RunConfig from a TOML table, with types checked against the dataclass."""
    return RunConfig.from_dict(_table(where, shared), where)


def _table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(f"{where}: must be a table, got {value!r}")
    return value


def arm_config(where: str, shared: RunConfig, arm: Any) -> RunConfig:
    _check_keys(where, _table(where, arm), ARM_KEYS)
    updates: dict[str, Any] = {}
    for key, value in arm.items():
        if key == "changes":
            continue
        if key in MERGED:
            _typed(where, key, value, dict)
            updates[key] = {**getattr(shared, key), **value}
        else:
            updates[key] = _typed(where, key, value, str)
    return replace(shared, **updates)


def _schedule(where: str, table: Any) -> Schedule:
    _check_keys(where, _table(where, table), SCHEDULE_KEYS)
    s = Schedule(**table)
    _typed(where, "mode", s.mode, str)
    if s.mode not in SCHEDULE_MODES:
        raise UsageError(f"{where}: mode {s.mode!r} is not one of {', '.join(SCHEDULE_MODES)}"
                         + did_you_mean(s.mode, SCHEDULE_MODES))
    _typed(where, "warmup", s.warmup, int)
    _typed(where, "block_size", s.block_size, int)
    if s.warmup < 0 or s.block_size < 1:
        raise UsageError(f"{where}: warmup must be >= 0 and block_size >= 1")
    check_stopping(where, s)
    return s


def check_stopping(where: str, s: Schedule) -> None:
    """``stopping``, ``max_items`` and ``look_every``: one-line errors naming the key."""
    _typed(where, "stopping", s.stopping, str)
    if s.stopping not in STOPPINGS:
        raise UsageError(f"{where}: stopping {s.stopping!r} is not one of "
                         f"{', '.join(STOPPINGS)}" + did_you_mean(s.stopping, STOPPINGS))
    if s.max_items is not None and _typed(where, "max_items", s.max_items, int) < 1:
        raise UsageError(f"{where}: max_items must be >= 1, got {s.max_items}")
    if _typed(where, "look_every", s.look_every, int) < 1:
        raise UsageError(f"{where}: look_every must be >= 1, got {s.look_every}")
    if not s.sequential and (s.max_items is not None or s.look_every != 1):
        raise UsageError(f"{where}: max_items and look_every apply only with stopping = "
                         "\"sequential\"")


def _bench(where: str, table: Any) -> BenchPlan:
    _check_keys(where, _table(where, table), BENCH_KEYS)
    lens = table.get("input_len", [])
    lens = [lens] if isinstance(lens, int) else _typed(where, "input_len", lens, list)
    for n in lens:
        _typed(where, "input_len", n, int)
    for key in ("output_len", "repeats", "warmup"):
        if key in table:
            _typed(where, key, table[key], int)
    return BenchPlan(input_len=tuple(lens), **{k: v for k, v in table.items()
                                              if k != "input_len"})


def parse_experiment(doc: Mapping[str, Any], where: str) -> Experiment:
    _check_keys(where, doc, TOP_KEYS)
    shared = shared_config(f"{where} [shared]", doc.get("shared", {}))
    arms_table = doc.get("arms", {})
    if not isinstance(arms_table, dict) or len(arms_table) < 2:
        raise UsageError(f"{where}: an experiment needs at least two [arms.NAME] tables")
    arms = {check_arm_name(where, name): arm_config(f"{where} [arms.{name}]", shared, table)
            for name, table in arms_table.items()}
    baseline = _typed(where, "baseline", doc.get("baseline", next(iter(arms))), str)
    for key in ("name", "description"):
        if key in doc:
            _typed(where, key, doc[key], str)
    if baseline not in arms:
        raise UsageError(f"{where}: baseline {baseline!r} is not an arm"
                         + did_you_mean(str(baseline), arms))
    policy = doc.get("policy")
    if policy is not None:
        _typed(where, "policy", policy, str)
    if "contract" in doc:
        _typed(where, "contract", doc["contract"], str)
    expect = _typed(where, "expect", doc.get("expect", "lossy"), str)
    if expect not in EXPECTS:
        raise UsageError(f"{where}: expect {expect!r} is not one of {', '.join(EXPECTS)}"
                         + did_you_mean(expect, EXPECTS))
    changes = {name: check_patterns(f"{where} [arms.{name}] changes", table["changes"])
               for name, table in arms_table.items() if "changes" in table}
    allow = check_patterns(f"{where} allow_differences", doc["allow_differences"]) \
        if "allow_differences" in doc else ()
    return Experiment(name=str(doc.get("name", "ab")), arms=arms, baseline=baseline,
                      changes=changes, allow_differences=allow, contract=doc.get("contract"),
                      schedule=_schedule(f"{where} [schedule]", doc.get("schedule", {})),
                      policy=policy, bench=_bench(f"{where} [bench]", doc.get("bench", {})),
                      description=str(doc.get("description", "")), expect=expect,
                      evidence=_evidence(f"{where} [evidence]", doc.get("evidence", {})))


def _evidence(where: str, table: Any) -> Evidence:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: must be a table")
    _check_keys(where, table, EVIDENCE_KEYS)
    for key in ("agreement", "probes"):
        if key in table:
            _typed(where, key, table[key], bool)
    if "agreement_tokens" in table and _typed(where, "agreement_tokens",
                                              table["agreement_tokens"], int) < 0:
        raise UsageError(f"{where}: agreement_tokens must be >= 0 (0: every output token), "
                         f"got {table['agreement_tokens']}")
    if "probe_len" in table and (_typed(where, "probe_len", table["probe_len"], int) < 64):
        raise UsageError(f"{where}: probe_len must be >= 64 tokens, got {table['probe_len']}")
    patterns = compile_patterns(where, table["log_patterns"]) if "log_patterns" in table \
        else ()
    return Evidence(**{**table, "log_patterns": patterns})


def load_experiment(path: Path) -> Experiment:
    if not path.is_file():
        raise UsageError(f"experiment file not found: {path}")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    exp = parse_experiment(doc, str(path))
    if exp.policy is not None and not Path(exp.policy).is_absolute() and not (
            shipped_name(exp.policy) and not (path.parent / exp.policy).exists()):
        exp = replace(exp, policy=str(path.parent / exp.policy))
    if exp.contract is not None and not Path(exp.contract).is_absolute():
        exp = replace(exp, contract=str(path.parent / exp.contract))
    for name, cfg in exp.arms.items():  # relative paths in the file are relative to it
        fixed: dict[str, Any] = {k: str(path.parent / v) for k in ("model", "data", "shots_file")
                 if (v := getattr(cfg, k)) and not Path(v).is_absolute()
                 and not v.startswith("hf:") and (path.parent / v).exists()}
        if fixed:
            exp.arms[name] = replace(cfg, **fixed)
    return exp
