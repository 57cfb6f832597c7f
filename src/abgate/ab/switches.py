"""The declared-switch wiring of an A/B run: each candidate compared with the baseline
before the load (:func:`request_differences`) and after it (:func:`loaded_differences`),
into ``ab.json``'s ``differences``. The keys and patterns are :mod:`abgate.ab.declared`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from abgate.ab import declared, optout
from abgate.ab.experiment import Experiment
from abgate.errors import UsageError
from abgate.records import documents as docs
from abgate.records import facts
from abgate.records.sections import ArmDifferences, DiffStage, EngineRecord, Provenance
from abgate.runner.spec import PreparedRun

log = logging.getLogger("abgate.ab")


def request_differences(exp: Experiment, prepared: dict[str, PreparedRun]
                        ) -> dict[str, ArmDifferences]:
    """Each candidate's differences from the baseline before any load, declared and
    undeclared apart; an undeclared one is refused (exit 2, nothing written) when the
    experiment declares anything, else logged as a warning."""
    base = declared.request_facts(prepared[exp.baseline].spec)
    out: dict[str, ArmDifferences] = {}
    for arm in exp.candidates:
        patterns = exp.declared_for(arm)
        diff = declared.differing(base, declared.request_facts(prepared[arm].spec))
        known, unknown = declared.split(diff, patterns)
        if unknown and exp.declares:
            raise UsageError(declared.refusal(arm, exp.baseline, unknown, "before the load"))
        if unknown:
            log.warning("arm %r differs from %r in %s, declared nowhere (declare the switch "
                        "with changes = [...] to have any other difference refused)", arm,
                        exp.baseline, ", ".join(unknown))
        out[arm] = ArmDifferences(declares=exp.declares,
                                  request=declared.section(known, unknown, patterns))
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
        known, unknown, moving = _split_loaded(declared.differing(base, found), patterns,
                                               request)
        entry.loaded = declared.section(known, unknown, patterns)
        if moving:
            entry.loaded.volatile = moving
        entry.unobserved = declared.unused(  # the arm's own claims, not allowances
            exp.changes.get(arm, ()), {**request.declared, **known})
        unchanged = declared.no_op(request, entry.loaded)
        if unchanged:
            entry.unchanged = unchanged
            log.warning("arm %r: %s changed nothing observable after load (effective "
                        "config identical to %r's)", arm, ", ".join(entry.unchanged),
                        exp.baseline)
        entry.config_only = declared.config_only(request, entry.loaded) or None
        _opt_out(exp, arm, entry, out)
        if unknown and exp.declares:
            return declared.refusal(arm, exp.baseline, unknown, "after the load")
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
    known, unknown = declared.split({k: v for k, v in rest.items() if k not in follows},
                                    patterns)
    return {**known, **follows}, unknown, moving


def _loaded_facts(engines: Mapping[str, EngineRecord | None],
                  provenance: Mapping[str, Provenance | None], arm: str
                  ) -> dict[str, str] | None:
    engine = engines.get(arm)
    if engine is None:
        return None
    return declared.loaded_facts(engine, provenance.get(arm))


def _opt_out(exp: Experiment, arm: str, entry: ArmDifferences, out: Path) -> None:
    """Arms that differ only by env: record what shows the variable took effect."""
    dirs = (out / "arms" / exp.baseline, out / "arms" / arm)
    found = optout.opt_out_evidence(entry, dirs, exp.evidence.log_patterns)
    if found is None:
        return
    entry.opt_out = found
    if found.warning:
        log.warning("arm %r: %s", arm, found.warning)
