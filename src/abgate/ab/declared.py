"""Declared differences: only the switches an experiment names may differ between arms.

An arm says what it changes (``changes = ["flash_attn", "type_k"]`` in ``[arms.NAME]``)
and the experiment may allow whole classes (``allow_differences = ["env.*"]``). Every
fact abgate records about an arm is a flat key:

- before any load: ``engine``, ``model`` (the model's SHA-256), ``engine_args.K``,
  ``engine_options.K``, ``env.K``;
- after the load: ``engine_version``, ``effective.K`` (the engine's effective
  configuration, less the facts of one launch: ``records.facts.PER_LAUNCH``) and
  ``library.NAME`` (the SHA-256 of each shared library its processes mapped).

The keys, the pattern matcher and what is never compared are those of
:mod:`abgate.records.facts`, the one statement of what may differ between two runs
(``flash_attn`` matches ``engine_args.flash_attn`` and ``effective.flash_attn``). A
candidate may differ from the baseline only in keys its own ``changes``, the baseline's
``changes`` or the experiment's ``allow_differences`` match. With no declaration at all
nothing is refused: every difference is reported as undeclared (and logged as a warning).

An A/B run compares each candidate with the baseline before the load
(:func:`request_differences`) and after it (:func:`loaded_differences`), into
``ab.json``'s ``differences``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.ab import optout
from abgate.ab.experiment import Experiment
from abgate.errors import AbgateError, UsageError
from abgate.records import documents as docs
from abgate.records import facts
from abgate.records.facts import differing, matches
from abgate.records.sections import ArmDifferences, DiffStage, EngineRecord, Provenance, Spec
from abgate.runner.spec import PreparedRun

__all__ = ["differing", "matches"]  # the one matcher and differ (records/facts.py)
log = logging.getLogger("abgate.ab")

# Per-rank facts (``effective_config.ranks``: each worker's dtypes, quantization, graph
# mode) repeat what the effective config reports, per worker; they are recorded and held
# to a contract's [every_rank] clauses, not compared as differences of their own (a
# declared dtype or quantization switch would otherwise always leave one undeclared).
PER_RANK_KEYS = ("effective.ranks", "effective.ranks_not_reported")


class UndeclaredDifference(AbgateError):
    """A difference seen only after the load (records kept: exit 1)."""


def request_facts(spec: Mapping[str, Any]) -> dict[str, str]:
    """The keys a prepared arm's spec shows before any load."""
    typed = Spec.model_validate(spec)
    model = typed.model
    found = {"engine": facts.text(typed.engine),
             "model": facts.text(model.sha256 or model.to_dict()) if model
             else facts.text(None)}
    for group, table in (("engine_args", typed.engine_args),
                         ("engine_options", typed.engine_options), ("env", typed.env)):
        found.update(facts.group(group, table))
    return found


def _libraries(provenance: Provenance | None) -> dict[str, str]:
    procs = provenance.libraries if provenance is not None else None
    found = facts.libraries((lib.path, str(lib.sha256) if lib.sha256 else None)
                            for proc in procs or [] for lib in proc.libs)
    return {f"library.{name}": shas for name, shas in found.items()}


def loaded_facts(engine: EngineRecord, provenance: Provenance | None) -> dict[str, str]:
    """The keys a loaded arm shows: engine version, effective config, libraries."""
    found = {"engine_version": facts.text(engine.version)}
    found.update({k: v for k, v in facts.group("effective", engine.effective_config).items()
                  if not facts.per_launch(k) and not matches(k, PER_RANK_KEYS)})
    found.update(_libraries(provenance))
    return found


def split(diff: Mapping[str, list[str]], patterns: Sequence[str]
          ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    declared = {k: v for k, v in diff.items() if matches(k, patterns)}
    return declared, {k: v for k, v in diff.items() if k not in declared}


def request_differences(exp: Experiment, prepared: dict[str, PreparedRun]
                        ) -> dict[str, ArmDifferences]:
    """Each candidate's differences from the baseline before any load, declared and
    undeclared apart; an undeclared one is refused (exit 2, nothing written) when the
    experiment declares anything, else logged as a warning."""
    base = request_facts(prepared[exp.baseline].spec)
    out: dict[str, ArmDifferences] = {}
    for arm in exp.candidates:
        patterns = exp.declared_for(arm)
        diff = differing(base, request_facts(prepared[arm].spec))
        known, unknown = split(diff, patterns)
        if unknown and exp.declares:
            raise UsageError(refusal(arm, exp.baseline, unknown, "before the load"))
        if unknown:
            log.warning("arm %r differs from %r in %s, declared nowhere (declare the switch "
                        "with changes = [...] to have any other difference refused)", arm,
                        exp.baseline, ", ".join(unknown))
        out[arm] = ArmDifferences(declares=exp.declares,
                                  request=section(known, unknown, patterns))
    return out


def loaded_differences(exp: Experiment, doc: docs.AbRecord,
                       engines: Mapping[str, EngineRecord | None],
                       provenance: Mapping[str, Provenance | None], out: Path) -> str | None:
    """After a load: each candidate whose and whose baseline's engines (``engines``: each
    arm's as its record holds it, None before its load) have loaded,
    compared with the baseline (engine version, effective config, ``provenance``'s
    libraries) into ``doc.differences``; the refusal of the first undeclared difference
    when the experiment declares anything (the caller saves and stops), else None."""
    base = _loaded_facts(engines, provenance, exp.baseline)
    for arm in exp.candidates:
        found = _loaded_facts(engines, provenance, arm)
        if base is None or found is None:
            continue
        patterns = exp.declared_for(arm)
        entry = doc.differences.setdefault(arm, ArmDifferences())
        request = entry.request or DiffStage()
        known, unknown, moving = _split_loaded(differing(base, found), patterns, request)
        entry.loaded = section(known, unknown, patterns)
        if moving:
            entry.loaded.volatile = moving
        entry.unobserved = unused(  # the arm's own claims, not allowances
            exp.changes.get(arm, ()), {**request.declared, **known})
        unchanged = no_op(request, entry.loaded)
        if unchanged:
            entry.unchanged = unchanged
            log.warning("arm %r: %s changed nothing observable after load (effective "
                        "config identical to %r's)", arm, ", ".join(entry.unchanged),
                        exp.baseline)
        entry.config_only = config_only(request, entry.loaded) or None
        _opt_out(exp, arm, entry, out)
        if unknown and exp.declares:
            return refusal(arm, exp.baseline, unknown, "after the load")
        if unknown:
            log.warning("arm %r differs from %r after the load in %s, declared nowhere",
                        arm, exp.baseline, ", ".join(unknown))
    return None


def _split_loaded(diff: dict[str, list[str]], patterns: Sequence[str], request: DiffStage
                  ) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """Declared, undeclared and volatile differences after the load. Volatile figures (a
    profiler's KV blocks, memory in use) are never a difference; the request's echo and the
    model config's digest count as declared when the request's engine args were."""
    moving = {k: v for k, v in diff.items() if facts.volatile(k)}
    rest = {k: v for k, v in diff.items() if k not in moving}
    args_declared = any(k.startswith("engine_args.") for k in request.declared)
    args_undeclared = any(k.startswith("engine_args.") for k in request.undeclared)
    follows = {k: v for k, v in rest.items()
               if (k in facts.ECHO and args_declared and not args_undeclared)
               or (k in facts.DERIVED and args_declared)}
    known, unknown = split({k: v for k, v in rest.items() if k not in follows}, patterns)
    return {**known, **follows}, unknown, moving


def _loaded_facts(engines: Mapping[str, EngineRecord | None],
                  provenance: Mapping[str, Provenance | None], arm: str
                  ) -> dict[str, str] | None:
    engine = engines.get(arm)
    if engine is None:
        return None
    return loaded_facts(engine, provenance.get(arm))


def _opt_out(exp: Experiment, arm: str, entry: ArmDifferences, out: Path) -> None:
    """Arms that differ only by env: record what shows the variable took effect."""
    dirs = (out / "arms" / exp.baseline, out / "arms" / arm)
    found = optout.opt_out_evidence(entry, dirs, exp.evidence.log_patterns)
    if found is None:
        return
    entry.opt_out = found
    if found.warning:
        log.warning("arm %r: %s", arm, found.warning)


def section(declared: dict[str, list[str]], undeclared: dict[str, list[str]],
            patterns: Sequence[str]) -> DiffStage:
    """One stage of an arm's ``differences`` entry in ``ab.json``."""
    return DiffStage(patterns=list(patterns), declared=declared, undeclared=undeclared)


def unused(patterns: Sequence[str], diff: Mapping[str, list[str]]) -> list[str]:
    """Declared patterns that match no difference (a switch that changed nothing seen)."""
    return [p for p in patterns if not any(matches(k, [p]) for k in diff)]


def no_op(request: DiffStage | None, loaded: DiffStage | None) -> list[str]:
    """The engine args a candidate's request differs in when nothing the engine reports
    after the load differs (effective config, model config digest, engine version,
    libraries; the request's echo aside): a switch the engine ignored. Empty otherwise."""
    if request is None or loaded is None:
        return []
    args = [k for k in (*request.declared, *request.undeclared)
            if k.startswith("engine_args.")]
    seen = [k for k in (*loaded.declared, *loaded.undeclared) if k not in facts.ECHO]
    return [] if seen else args


def config_only(request: DiffStage | None, loaded: DiffStage | None) -> list[str]:
    """The engine args a candidate differs in when, after the load, only the model config's
    digest differs (``records.facts.DERIVED``; the echo aside): the config object changed, but
    nothing the engine reports about what it runs. Empty otherwise."""
    if request is None or loaded is None:
        return []
    args = [k for k in (*request.declared, *request.undeclared)
            if k.startswith("engine_args.")]
    seen = [k for k in (*loaded.declared, *loaded.undeclared) if k not in facts.ECHO]
    return args if seen and all(k in facts.DERIVED for k in seen) else []


def refusal(arm: str, baseline: str, undeclared: Mapping[str, list[str]], stage: str) -> str:
    shown = "; ".join(f"{k} ({v[0]} vs {v[1]})" for k, v in list(undeclared.items())[:12])
    more = f" and {len(undeclared) - 12} more" if len(undeclared) > 12 else ""
    return (f"arm {arm!r} differs from {baseline!r} in undeclared key(s) {stage}: "
            f"{shown}{more}; declare them in [arms.{arm}] changes = [...] or in "
            "allow_differences, or make the arms equal there")
