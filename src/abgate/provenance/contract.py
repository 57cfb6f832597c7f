"""Run contracts: required engine settings, env vars, engine args and libraries.

A contract (TOML, see docs/provenance.md) is checked at three points of a run:
:func:`check_request` on the requested configuration before the model loads (only
what the request can show), :func:`check_effective` on the engine's effective
configuration after load (every ``settings`` clause must be reported and match),
and :func:`check_libraries` on the worker library mappings. Values compare exactly:
types must agree, except that an int equals a float of the same value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate.errors import AbgateError
from abgate.provenance.contract_toml import Contract, load_contract
from abgate.provenance.libmaps import (
    Selector,
    WorkerMapping,
    check_required,
    required_from_paths,
)
from abgate.provenance.paths import expand_patterns
from abgate.records.sections import ContractFinding, ContractName, ContractRecord
from abgate.redact import REDACTED, is_secret_name

__all__ = [
    "ABSENT", "ANY_VALUE", "Contract", "ContractOutcome", "ContractViolation", "Violation",
    "check_effective", "check_libraries", "check_request", "load_contract", "values_equal",
]

STAGES = ("request", "effective", "libraries")


class _Marker:
    """A value that is not a value: an unset env var, an arg not given, 'any value'."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


ABSENT: Any = _Marker("absent")
ANY_VALUE: Any = _Marker("any value")


def values_equal(expected: Any, actual: Any) -> bool:
    """Exact, type-strict equality; the one leniency is ``2048 == 2048.0``."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return expected == actual
    if isinstance(expected, str) or isinstance(actual, str):
        return isinstance(expected, str) and isinstance(actual, str) and expected == actual
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return expected.keys() == actual.keys() and all(
            values_equal(expected[k], actual[k]) for k in expected)
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(expected) == len(actual) and all(
            values_equal(e, a) for e, a in zip(expected, actual, strict=True))
    return type(expected) is type(actual) and bool(expected == actual)


def show(value: Any) -> str:
    """A value as a contract author would write it: ``"f16"``, ``2048``, ``false``."""
    if isinstance(value, _Marker):
        return value.name
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _plain(value: Any) -> Any:
    if isinstance(value, _Marker):
        return repr(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list",
            dict: "table", type(None): "null"}.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Violation:
    """One contract clause that did not hold at one stage."""

    clause: str
    expected: Any
    actual: Any
    stage: str
    note: str = ""

    def message(self) -> str:
        text = f"[{self.stage}] {self.clause}: expected {show(self.expected)}, " \
               f"got {show(self.actual)}"
        if (not isinstance(self.expected, _Marker) and not isinstance(self.actual, _Marker)
                and _type_name(self.expected) != _type_name(self.actual)):
            text += f" ({_type_name(self.expected)} vs {_type_name(self.actual)})"
        return text + (f" — {self.note}" if self.note else "")

    def finding(self) -> ContractFinding:
        """As recorded under ``provenance.contract``."""
        return ContractFinding(clause=self.clause, message=self.message(),
                               expected=_plain(self.expected), actual=_plain(self.actual),
                               stage=self.stage, note=self.note)


class ContractViolation(AbgateError):
    """The run broke its contract; ``violations`` lists every clause that failed."""

    def __init__(self, violations: Sequence[Violation], contract: Contract | None = None):
        self.violations = list(violations)
        self.contract = contract
        label = f"contract {contract.label}" if contract else "contract"
        count = len(self.violations)
        details = "; ".join(v.message() for v in self.violations)
        super().__init__(f"{label} violated ({count} clause{'s' * (count != 1)}): {details}")
        # Refused on the request alone (before any load, nothing written): bad input, 2.
        # Found after load (records kept): a failure, 1.
        self.exit_code = 2 if all(v.stage == "request" for v in self.violations) else 1


def _env_shown(name: str, value: Any) -> Any:
    return REDACTED if is_secret_name(name) and not isinstance(value, _Marker) else value


def _engine_clause(contract: Contract, engine_name: str, stage: str) -> list[Violation]:
    if contract.engine is not None and contract.engine != engine_name:
        return [Violation("engine", contract.engine, engine_name, stage)]
    return []


def _check_args(contract: Contract, args: Mapping[str, Any]) -> list[Violation]:
    out: list[Violation] = []
    for key, want in contract.settings.items():
        if key in args and not values_equal(want, args[key]):
            out.append(Violation(f"settings.{key}", want, args[key], "request",
                                 "requested explicitly with another value"))
    for key, want in contract.required_args.items():
        got = args.get(key, ABSENT)
        if got is ABSENT or not values_equal(want, got):
            out.append(Violation(f"engine_args.required.{key}", want, got, "request"))
    for key in contract.present_args:
        if key not in args:
            out.append(Violation(f"engine_args.required.{key}", ANY_VALUE, ABSENT,
                                 "request", "must be passed explicitly"))
    for key in contract.forbidden_args:
        if key in args:
            out.append(Violation(f"engine_args.forbidden.{key}", ABSENT, args[key], "request"))
    return out


def _check_env(contract: Contract, env: Mapping[str, str]) -> list[Violation]:
    out: list[Violation] = []
    for name, want in contract.required_env.items():
        got = env.get(name, ABSENT)
        if got is ABSENT or got != want:
            out.append(Violation(f"env.required.{name}", _env_shown(name, want),
                                 _env_shown(name, got), "request"))
    for name in contract.present_env:
        if name not in env:
            out.append(Violation(f"env.required.{name}", ANY_VALUE, ABSENT, "request"))
    for name in contract.forbidden_env:
        if name in env:
            out.append(Violation(f"env.forbidden.{name}", ABSENT,
                                 _env_shown(name, env[name]), "request"))
    return out


def check_request(contract: Contract, engine_name: str, engine_args: Mapping[str, Any],
                  env: Mapping[str, str]) -> list[Violation]:
    """Clauses the request can already break (fail fast, before the model loads).

    ``engine_args`` are the args as the user gave them (after ``KEY=VALUE``
    coercion); ``env`` is the environment the engine will run with. A ``settings``
    clause fails here only when the same key was requested with another value.
    """
    return [*_engine_clause(contract, engine_name, "request"),
            *_check_args(contract, engine_args), *_check_env(contract, env)]


def check_effective(contract: Contract, engine_name: str,
                    effective_config: Mapping[str, Any]) -> list[Violation]:
    """Every ``settings`` clause against the engine's effective configuration."""
    out = _engine_clause(contract, engine_name, "effective")
    for key, want in contract.settings.items():
        if key not in effective_config:
            out.append(Violation(f"settings.{key}", want, ABSENT, "effective",
                                 f"not reported by this engine ({engine_name}'s effective "
                                 "config does not report this key)"))
        elif not values_equal(want, effective_config[key]):
            out.append(Violation(f"settings.{key}", want, effective_config[key], "effective"))
    return out + _check_ranks(contract, engine_name, effective_config)


def _check_ranks(contract: Contract, engine_name: str,
                 effective_config: Mapping[str, Any]) -> list[Violation]:
    """Every ``[every_rank]`` clause against each rank's facts (``ranks``)."""
    ranks = effective_config.get("ranks")
    out: list[Violation] = []
    for key, want in contract.every_rank.items():
        clause = f"every_rank.{key}"
        if not isinstance(ranks, list) or not ranks:
            why = effective_config.get("ranks_not_reported") or "no per-rank facts"
            out.append(Violation(clause, want, ABSENT, "effective",
                                 f"not reported by this engine ({engine_name}: {why})"))
            continue
        for facts in ranks:
            rank = facts.get("rank") if isinstance(facts, Mapping) else None
            have = facts.get(key, ABSENT) if isinstance(facts, Mapping) else ABSENT
            if have is ABSENT:
                out.append(Violation(f"{clause} (rank {rank})", want, ABSENT, "effective",
                                     f"not reported by this engine (rank {rank} of "
                                     f"{engine_name} does not report this key)"))
            elif not values_equal(want, have):
                out.append(Violation(f"{clause} (rank {rank})", want, have, "effective"))
    return out


def check_libraries(contract: Contract, mappings: Sequence[WorkerMapping],
                    root: Path) -> list[Violation]:
    """Required libraries (paths/globs relative to ``root``) against worker mappings."""
    out: list[Violation] = []
    paths = []
    for pattern in contract.required_libraries:
        hits = expand_patterns(root, [pattern], "library pattern", strict=False)
        if not hits:
            out.append(Violation(f"libraries.required {pattern}", ANY_VALUE,
                                 ABSENT, "libraries", f"matches no file under {root}"))
        paths.extend(hits)
    where = Selector(contract.library_roles, contract.library_ranks)
    for issue in check_required(required_from_paths(paths), mappings, contract.library_mode,
                                where):
        out.append(Violation(f"libraries.required {Path(issue.required).name}", issue.required,
                             ABSENT if issue.found is None else issue.found, "libraries",
                             issue.message()))
    return out


@dataclass
class ContractOutcome:
    """The contract and what each checked stage found; recorded with the run.

    ``exempt`` (a clause name -> bool) sets aside the clauses an A/B arm's declared
    switch breaks by design: they are recorded under ``exempted`` and never fail."""

    contract: Contract
    checked: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    exempt: Callable[[str], bool] | None = None
    exempted: list[Violation] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations

    def record(self, stage: str, violations: Sequence[Violation]) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown contract stage {stage!r}")
        self.checked.append(stage)
        for v in violations:
            (self.exempted if self.exempt and self.exempt(v.clause) else
             self.violations).append(v)

    def raise_if_violated(self) -> None:
        if self.violations:
            raise ContractViolation(self.violations, self.contract)

    def recorded(self, path: str) -> ContractRecord:
        """The outcome as recorded under ``provenance.contract`` (``path``: the contract
        file's)."""
        return ContractRecord(path=path, passed=self.passed,
                              contract=ContractName.model_validate(self.contract.to_dict()),
                              violations=[v.finding() for v in self.violations],
                              exempted=[v.finding() for v in self.exempted],
                              checked=list(self.checked))
