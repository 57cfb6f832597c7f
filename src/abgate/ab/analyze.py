"""From a finished (or partial) A/B directory to ``comparison.json``: paired
statistics and a verdict per candidate arm, computed from the saved records only.

Besides the samples, each candidate's comparison gets:

- ``agreement``: distribution agreement with the baseline from
  ``arms/<arm>/agreement.jsonl`` (teacher-forced scoring), with its cost from
  the ``scoring`` section of ab.json against the arm's generation time; "not measured" with the
  reason when the file is missing or unusable;
- ``probes``: both arms' ``arms/<arm>/probes.json`` side by side, when probes ran;
- ``expect``: the experiment's ``expect`` ("lossy" unless set);
- ``speed_only``: why quality gates do not apply (random weights), else None;
- ``difference_warnings``: what a reader of the arm's differences (``ab.json``) must not
  miss (:func:`difference_warnings`), and the fleet notes.

Of a fleet A/B's ``fleet`` section (``records.fleet``, written by ``abgate.fleet``) the
analysis reads the replica each item ran on (the replica-clustered speed interval,
:func:`replica_of_items`) and the notes a verdict gets on what it rests on (replicas,
losses, declared host differences: :func:`fleet_notes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.compare import Policy, compare_samples, decide, load_policy
from abgate.compare.agreement import not_measured, summarize_agreement
from abgate.compare.agreement_rows import AgreementRow, agreement_row_of
from abgate.compare.pairing import SampleLike
from abgate.compare.probes import compare_probes
from abgate.compare.sequential import sequential_section
from abgate.compare.verdict import EXIT_CODES
from abgate.errors import AbgateError
from abgate.host_load import summarize
from abgate.records.agreement import Agreement, ScoringOverhead
from abgate.records.comparison import ArmResult, ComparisonDoc, Probes, Sequential
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.fleet import FleetRecord, FleetSession
from abgate.records.samples import Sample
from abgate.records.sections import ArmDifferences
from abgate.runner import records as rec
from abgate.runner.documents import read_record, write_record
from abgate.runner.samples import load_samples
from abgate.safejson import read_json

COMPARISON_FILE = "comparison.json"
AGREEMENT_FILE, PROBES_FILE = "agreement.jsonl", "probes.json"
DECISION_ORDER = ("REJECT", "INCONCLUSIVE", "ACCEPT")  # worst first
AGREEMENT_PASS = "agreement pass"  # a FleetLoss's ``at`` when lost while scoring


def arm_samples(out: Path, arm: str) -> list[Sample]:
    """The arm's measured samples (warm-ups left out), as the models."""
    return [s for s in load_samples(out / "arms" / arm / rec.SAMPLES_FILE) if not s.warmup]


def read_agreement(path: Path, repair: bool = False) -> list[AgreementRow]:
    """An arm's ``agreement.jsonl``, each line as its :class:`AgreementRow` (read
    leniently: what is wrong with a row is counted by the analysis, never fatal); a
    torn last line is ignored (cut off when ``repair``)."""
    return [agreement_row_of(row) for row in rec.read_samples(path, repair=repair)]


def _generation_seconds(samples: Sequence[SampleLike]) -> float | None:
    times = [float(t) for s in map(Sample.of, samples)
             if isinstance(t := s.timing.e2e_s, int | float) and math.isfinite(t)]
    return sum(times) if times else None


def _cost(ab: AbRecord, arm: str, base: str,
          samples: Mapping[str, Sequence[SampleLike]]) -> dict[str, ScoringOverhead]:
    """Scoring seconds and tokens per arm against the arm's generation seconds."""
    out: dict[str, ScoringOverhead] = {}
    for name in (base, arm):
        info, generation = ab.scoring_of(name), _generation_seconds(samples[name])
        seconds = info.seconds
        out[name] = ScoringOverhead(
            scoring_seconds=seconds, n_tokens=info.n_tokens,
            max_tokens_per_sequence=info.max_tokens_per_sequence,
            n_sequences=info.n_sequences, prompts_restored=info.prompts_restored,
            method=info.method, generation_seconds=generation,
            scoring_over_generation=seconds / generation
            if seconds is not None and generation else None)
    return out


def _agreement(out: Path, ab: AbRecord, arm: str, base: str, confidence: float,
               samples: Mapping[str, Sequence[SampleLike]]) -> Agreement:
    path = out / "arms" / arm / AGREEMENT_FILE
    recorded = ab.scoring_of(arm)
    why = recorded.error or recorded.reason
    if not path.exists():
        section = not_measured(f"{why}" if why else f"no {AGREEMENT_FILE} for arm {arm!r} "
                               "(the engine cannot score, or the A/B predates scoring)")
    else:
        try:
            section = summarize_agreement(read_agreement(path), confidence=confidence)
        except AbgateError as exc:
            section = not_measured(f"{path.name} is unreadable: {exc}")
    return section.model_copy(update={"cost": _cost(ab, arm, base, samples)})


def _probes_doc(out: Path, arm: str) -> tuple[Any, str | None]:
    path = out / "arms" / arm / PROBES_FILE
    if not path.exists():
        return None, f"no {PROBES_FILE} for arm {arm!r}"
    try:
        return read_json(path, error=AbgateError), None
    except AbgateError as exc:
        return None, f"{PROBES_FILE} of arm {arm!r} is unreadable ({exc})"


def _probes(out: Path, arm: str, base: str) -> Probes | None:
    """Both arms' probes side by side; None when neither arm ran probes."""
    if not any((out / "arms" / name / PROBES_FILE).exists() for name in (base, arm)):
        return None
    (base_doc, base_why), (cand_doc, cand_why) = _probes_doc(out, base), _probes_doc(out, arm)
    return compare_probes(base_doc, cand_doc, base_missing=base_why, cand_missing=cand_why)


def _effective(out: Path, arm: str) -> dict[str, Any] | None:
    """The arm's effective facet (its ``run.json``), None without one."""
    path = out / "arms" / arm / rec.RUN_FILE
    if not path.exists():
        return None
    doc = read_record(path, "ab-arm", "run", model=RunRecord)
    return doc.engine.effective if doc.engine.loaded else None


def random_weights(ab: AbRecord, arm: str, samples: Sequence[SampleLike],
                   effective: Mapping[str, Any] | None = None) -> str | None:
    """Why ``arm`` runs random weights ("speed only"), or None; ``effective``: the arm's
    effective facet."""
    for where, value in ab.load_formats(arm, effective):
        if value == "dummy":
            return f"arm {arm!r} runs random weights ({where}: load_format = \"dummy\"), " \
                   "speed only"
    if any(Sample.of(s).random_weights for s in samples):
        return f"arm {arm!r} runs random weights (its samples say so), speed only"
    return None


def arm_extras(out: Path, ab: AbRecord, arm: str, base: str,
               confidence: float, samples: Mapping[str, Sequence[SampleLike]]
               ) -> dict[str, Any]:
    """What a candidate's comparison gets besides the paired statistics: ``expect``,
    ``speed_only``, ``agreement``, ``difference_warnings`` and (when probes ran)
    ``probes`` (keyword arguments of :meth:`Comparison.with_extras`)."""
    speed_only = (random_weights(ab, base, samples[base], _effective(out, base))
                  or random_weights(ab, arm, samples[arm], _effective(out, arm)))
    extras: dict[str, Any] = {
        "expect": ab.experiment.expects,
        "speed_only": speed_only,
        "agreement": _agreement(out, ab, arm, base, confidence, samples),
        # undeclared differences, an opt-out nothing shows: notes of the verdict
        "difference_warnings": [*difference_warnings(ab.differences.get(arm), arm),
                                *_identical_outputs(ab, arm, samples[base], samples[arm]),
                                *fleet_notes(ab.fleet)],
        # what the host was doing while the arms ran: whether "busy" is measured
        "host_load": summarize(ab.host_load.snapshots if ab.host_load is not None else []),
    }
    probes = _probes(out, arm, base)
    if probes is not None:
        extras["probes"] = probes
    return extras


def _identical_outputs(ab: AbRecord, arm: str, base: Sequence[SampleLike],
                       cand: Sequence[SampleLike]) -> list[str]:
    """The note for a switch whose only trace after the load is the model config's
    digest, when every paired output is token-identical (empty otherwise)."""
    entry = ab.differences.get(arm)
    args = entry.config_only if entry is not None else None
    if not args:
        return []
    def outputs(samples: Sequence[SampleLike]) -> dict[tuple[str, str], Any]:
        return {(str(s.item_id), str(s.seed)): s.output.token_ids
                for s in map(Sample.of, samples) if not s.warmup}
    a, b = outputs(base), outputs(cand)
    if not a or a.keys() != b.keys() or any(a[k] is None or a[k] != b[k] for k in a):
        return []
    return [identical_outputs_warning(arm, list(args), len({k[0] for k in a}))]


def identical_outputs_warning(arm: str, args: Sequence[str], n_items: int) -> str:
    """The note for a switch whose only trace after the load is the model config's digest
    and whose outputs are token-identical to the baseline's on every item."""
    return (f"arm {arm}'s declared switch {', '.join(args)} changed only the model config's "
            f"digest after load (nothing else the engine reports), and its outputs are "
            f"token-identical to the baseline's on all {n_items} items: the model may not "
            "read what it changed.")


def difference_warnings(entry: ArmDifferences | Mapping[str, Any] | None,
                        arm: str = "candidate") -> list[str]:
    """What a reader of a candidate's differences must not miss: undeclared differences
    (when nothing was declared, so none was refused), an engine arg after which nothing
    differs and an opt-out nothing shows (None: no entry, none)."""
    if not isinstance(entry, ArmDifferences):  # as read from ab.json
        entry = ArmDifferences.model_validate(entry or {})
    out = []
    for stage, label in ((entry.request, "before the load"), (entry.loaded, "after the load")):
        if stage is not None and stage.undeclared:
            out.append(f"Undeclared differences {label} (nothing declared, so none was "
                       f"refused): {', '.join(stage.undeclared)}.")
    if entry.unobserved:
        out.append(f"Declared, but no recorded value differs: {', '.join(entry.unobserved)} "
                   "(the switch may not be set in this arm, or not be reported).")
    if entry.unchanged:
        out.append(f"arm {arm}'s declared switch {', '.join(entry.unchanged)} changed "
                   "nothing observable after load (effective config identical: effective "
                   "configuration, model config, engine version and libraries as the "
                   "baseline arm's); the engine may have ignored it.")
    if entry.opt_out is not None and entry.opt_out.warning:
        out.append(f"Opt-out evidence: none: {entry.opt_out.warning}.")
    return out


def item_order(samples: Sequence[SampleLike]) -> list[str]:
    """Item IDs in the order the samples were recorded (the sequence of a sequential
    A/B: appended in schedule order, so a resumed A/B keeps it)."""
    return list(dict.fromkeys(str(Sample.of(s).item_id) for s in samples))


def sequential_for(out: Path, ab: AbRecord, arm: str, base: str,
                   policy: Policy, samples: Mapping[str, Sequence[SampleLike]]
                   ) -> Sequential:
    """The sequential evaluation of one candidate from the saved records (the A/B's
    looks and the analysis both call this, so they agree on every look)."""
    path = out / "arms" / arm / AGREEMENT_FILE
    rows = (read_agreement(path, repair=True) if path.exists()
            and ab.experiment.scores_agreement else None)
    speed_only = (random_weights(ab, base, samples[base], _effective(out, base))
                  or random_weights(ab, arm, samples[arm], _effective(out, arm)))
    return sequential_section(samples[base], samples[arm], item_order(samples[base]), policy,
                              look_every=ab.experiment.look_every,
                              # max_items as run: ab.json's
                              max_items=ab.sequential.max_items if ab.sequential else None,
                              agreement=rows, speed_only=bool(speed_only),
                              arm_names=(base, arm))


def compare_arm(base: Sequence[SampleLike], cand: Sequence[SampleLike],
                policy: Policy, arm_names: tuple[str, str], extras: Mapping[str, Any], *,
                seed: int = 0, n_boot: int = 2000, allow_unmatched: bool = False,
                replicas: Mapping[str, str] | None = None) -> ArmResult:
    """One candidate against the baseline: paired statistics, ``extras`` beside them, and
    the policy's verdict. ``abgate ab`` and ``abgate compare`` both call this, so the
    two can never disagree on the same samples. ``allow_unmatched``: an unfinished A/B,
    where an interruption may fall between the two arms' samples of one item, is
    compared on the keys both arms have."""
    comparison = compare_samples(base, cand, seed=seed, n_boot=n_boot, arm_names=arm_names,
                                 confidence=policy.speed.confidence,
                                 allow_unmatched=allow_unmatched, replicas=replicas)
    comparison = comparison.with_extras(**extras)
    return ArmResult(comparison=comparison, verdict=decide(comparison, policy))


def analyze(out: Path, policy_path: str | None = None, seed: int = 0,
            n_boot: int = 2000) -> ComparisonDoc:
    """Compare every candidate arm against the baseline; write ``comparison.json`` and
    return it."""
    ab = read_record(out / "ab.json", "ab", model=AbRecord)
    exp = ab.experiment
    policy = load_policy(policy_path if policy_path is not None else exp.policy)
    base = str(exp.baseline)
    samples = {arm: arm_samples(out, arm) for arm in exp.arms}
    comparisons: dict[str, ArmResult] = {}
    for arm in exp.arms:
        if arm == base:
            continue
        extras = arm_extras(out, ab, arm, base, policy.speed.confidence, samples)
        if exp.stopping == "sequential":
            extras["sequential"] = sequential_for(out, ab, arm, base, policy, samples)
        comparisons[arm] = compare_arm(samples[base], samples[arm], policy, (base, arm),
                                       extras, seed=seed, n_boot=n_boot,
                                       allow_unmatched=ab.status != "complete",
                                       replicas=replica_of_items(ab.fleet))
    decisions = [c.verdict.decision for c in comparisons.values()]
    overall = next(d for d in DECISION_ORDER if d in decisions)
    if ab.status != "complete" and overall == "ACCEPT":
        overall = "INCONCLUSIVE"  # never accept on an unfinished run
    result = ComparisonDoc(schema_version=rec.SCHEMA_VERSION, kind="ab-comparison",
                           ab_status=ab.status, baseline=base, policy=policy,
                           comparisons=comparisons, decision=overall,
                           exit_code=EXIT_CODES[overall])
    write_record(out / COMPARISON_FILE, result)
    return result


def fleet_sessions(fleet: FleetRecord | None) -> list[FleetSession]:
    """The fleet sessions of an A/B, earliest first (a resume ran on another cluster:
    its replicas are other ones)."""
    return fleet.sessions() if fleet is not None else []


def replica_of_items(fleet: FleetRecord | None) -> dict[str, str]:
    """Item id -> the replica its first (item, seed) key ran on (``s.i``: replica i of
    session s when the A/B ran in more than one fleet session)."""
    out: dict[str, str] = {}
    runs = fleet_sessions(fleet)
    for n, run in enumerate(runs):
        for replica, keys in sorted((run.items_by_replica or {}).items()):
            label = f"{n}.{replica}" if len(runs) > 1 else str(replica)
            for key in keys:
                out.setdefault(str(key).rsplit("#", 1)[0], label)
    return out


def fleet_notes(fleet: FleetRecord | None) -> list[str]:
    """The verdict's notes for a fleet A/B (none for one machine)."""
    if fleet is None:
        return []
    by = {str(k): len(v) for k, v in (fleet.items_by_replica or {}).items()}
    counts = ", ".join(f"replica {k}: {n}" for k, n in sorted(by.items()))
    notes = [f"Fleet A/B: {len(fleet.replicas or [])} replica(s), both arms of every "
             f"item on one replica (items {counts}); speed intervals clustered by replica."]
    host_differences = list(fleet.host_differences or [])
    if host_differences:
        notes.append("Declared host differences between the replicas: "
                     f"{', '.join(map(str, host_differences))}.")
    n_sessions = len(fleet_sessions(fleet))
    if n_sessions > 1:
        notes.append(f"Resumed on another fleet: {n_sessions} fleet sessions; the "
                     "replicas of each are clusters of their own.")
    for loss in (x for run in fleet_sessions(fleet) for x in run.lost or []):
        if loss.at == AGREEMENT_PASS:
            notes.append(f"Replica {loss.replica} was lost in the agreement pass "
                         f"({loss.error}): the sample it was scoring was scored whole on "
                         "another replica, so each sample's rows come from one replica.")
            continue
        notes.append(f"Replica {loss.replica} was lost at {loss.at} "
                     f"({loss.error}): nothing of its item in flight was written; "
                     "it ran again on another replica, so the verdict rests on every "
                     f"item once, {sum(by.values())} in all, from the surviving "
                     "replicas and what the lost one finished before.")
    return notes
