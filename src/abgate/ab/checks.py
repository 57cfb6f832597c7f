"""What an A/B checks before anything is written: the policy, every arm prepared and
matched, every arm's contract, the declared differences, the schedule mode.

:func:`check_experiment` runs them once, in that order; ``run_ab`` and
``run_experiment`` both start from its :class:`Checked` (bad input: a one-line
UsageError, exit 2, before the directory is claimed or an engine loaded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath

from abgate.ab import declared
from abgate.ab.experiment import Experiment
from abgate.ab.runtime_weights import check_exposable
from abgate.compare import Policy, load_policy
from abgate.engines import engine_class
from abgate.errors import UsageError
from abgate.provenance import ContractOutcome, ContractViolation
from abgate.records.facts import matches
from abgate.records.sections import ArmDifferences
from abgate.runner.provenance import ProvenanceOptions, check_before_load
from abgate.runner.spec import PreparedRun, prepare

MATCHED = ("item_ids", "seeds", "sampling", "prompt", "suite")


@dataclass(frozen=True)
class Checked:
    """An experiment that passed every check before the load, and what they found."""

    exp: Experiment
    provenance: ProvenanceOptions  # with the experiment file's [contract] when none given
    policy: Policy
    prepared: dict[str, PreparedRun]
    contracts: dict[str, ContractOutcome | None]  # arm -> its request's contract outcome
    differences: dict[str, ArmDifferences]  # candidate -> its differences before the load
    mode: str  # "interleave" or "blocks"


def check_experiment(exp: Experiment, provenance: ProvenanceOptions | None = None,
                     policy: str | None = None) -> Checked:
    """Every check an A/B makes before it writes anything (cheap: model identities are
    cached); ``policy`` overrides the experiment's."""
    rules = load_policy(policy if policy is not None else exp.policy)  # bad policy: exit 2
    prov = provenance or ProvenanceOptions()
    if prov.contract is None and exp.contract is not None:  # the file's [contract]
        prov = replace(prov, contract=exp.contract)
    prepared = prepare_arms(exp)
    if exp.evidence.weights:
        check_exposable({arm: p.engine.spec.engine for arm, p in prepared.items()})
    contracts = check_contracts(exp, prepared, prov)
    differences = declared.request_differences(exp, prepared)
    mode = choose_mode(exp)  # a sequential A/B that would run in blocks is refused here
    return Checked(exp, prov, rules, prepared, contracts, differences, mode)


def prepare_arms(exp: Experiment) -> dict[str, PreparedRun]:
    """Prepare every arm (cheap, before any load) and enforce matching."""
    prepared = {name: prepare(cfg) for name, cfg in exp.arms.items()}
    base = prepared[exp.baseline].spec
    for name, p in prepared.items():
        for key in MATCHED:
            if p.spec[key] != base[key]:
                raise UsageError(f"arm {name!r} is not matched with {exp.baseline!r}: "
                                 f"{key} differs; arms may differ only in engine, model, "
                                 "engine args/options and env")
    return prepared


def check_contracts(exp: Experiment, prepared: dict[str, PreparedRun],
                    prov: ProvenanceOptions) -> dict[str, ContractOutcome | None]:
    """The contract checked on every arm's request, each arm's own declared changes
    (and ``allow_differences``) exempt (:func:`exemption`); a violation is refused with
    exit 2."""
    out: dict[str, ContractOutcome | None] = {}
    for arm, p in prepared.items():
        exempt = exemption((*exp.changes.get(arm, ()), *exp.allow_differences))
        try:
            out[arm] = check_before_load(prov, p.engine, exempt)
        except ContractViolation as exc:
            raise UsageError(f"arm {arm!r}: {exc}") from None
    return out


def clause_keys(clause: str) -> list[str]:
    """The keys a contract clause is about (``settings.K``: the arg and the effective
    value; ``env.required.N``: ``env.N``; ...)."""
    parts = clause.split(" ", 1)[0].split(".")
    if parts[0] == "settings" and len(parts) > 1:
        key = ".".join(parts[1:])
        return [f"engine_args.{key}", f"effective.{key}"]
    if parts[0] in ("engine_args", "env") and len(parts) > 2:
        return [f"{parts[0]}.{'.'.join(parts[2:])}"]
    if clause.startswith("libraries.required "):
        return [f"library.{PurePath(clause.split(' ', 1)[1]).name}"]
    return [clause]


def exemption(patterns: Sequence[str]) -> Callable[[str], bool] | None:
    """A contract-clause predicate: True for a clause about a declared key."""
    if not patterns:
        return None
    return lambda clause: any(matches(k, patterns) for k in clause_keys(clause))


def choose_mode(exp: Experiment) -> str:
    mode = exp.schedule.mode
    if mode == "auto":
        arms = list(exp.arms.values())
        same_env = all(a.env == arms[0].env for a in arms)
        in_process = all(engine_class(a.engine).in_process for a in arms)
        mode = "interleave" if same_env and in_process else "blocks"
    if exp.schedule.sequential and mode != "interleave":
        why = "" if exp.schedule.mode == "blocks" else (
            " (auto chose blocks: the arms differ in env or are not all in-process)")
        raise UsageError(f"[schedule] stopping = \"sequential\" needs the interleaved "
                         f"schedule (every arm resident, looks after each item); this "
                         f"experiment runs in blocks{why}")
    return mode
