"""From a finished (or partial) A/B directory to ``comparison.json``: paired
statistics and a verdict per candidate arm, computed from the saved records only.

Besides the samples, each candidate's comparison gets:

- ``agreement``: distribution agreement with the baseline from
  ``arms/<arm>/agreement.jsonl`` (teacher-forced scoring), with its cost from
  ``ab.json["scoring"]`` against the arm's generation time; "not measured" with the
  reason when the file is missing or unusable;
- ``probes``: both arms' ``arms/<arm>/probes.json`` side by side, when probes ran;
- ``expect``: the experiment's ``expect`` ("lossy" unless set);
- ``speed_only``: why quality gates do not apply (random weights), else None.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.ab import declared
from abgate.compare import Policy, compare_samples, decide, load_policy
from abgate.compare.agreement import not_measured, summarize_agreement
from abgate.compare.probes import compare_probes
from abgate.compare.sequential import sequential_section
from abgate.compare.verdict import EXIT_CODES
from abgate.errors import AbgateError
from abgate.runner import records as rec
from abgate.runner.documents import read_record

COMPARISON_FILE = "comparison.json"
AGREEMENT_FILE, PROBES_FILE = "agreement.jsonl", "probes.json"
DECISION_ORDER = ("REJECT", "INCONCLUSIVE", "ACCEPT")  # worst first


def arm_samples(out: Path, arm: str) -> list[dict[str, Any]]:
    path = out / "arms" / arm / rec.SAMPLES_FILE
    return [s for s in rec.read_samples(path) if not s.get("warmup")]


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, Mapping) else None
    return doc


def _generation_seconds(samples: Sequence[Mapping[str, Any]]) -> float | None:
    times = [float(t) for s in samples
             if isinstance(t := _get(s, "timing", "e2e_s"), int | float) and math.isfinite(t)]
    return sum(times) if times else None


def _cost(ab: Mapping[str, Any], arm: str, base: str,
          samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Scoring seconds and tokens per arm against the arm's generation seconds."""
    out: dict[str, Any] = {}
    for name in (base, arm):
        info = _get(ab, "scoring", name)
        info = info if isinstance(info, Mapping) else {}
        seconds, generation = info.get("seconds"), _generation_seconds(samples[name])
        ratio = (seconds / generation if isinstance(seconds, int | float) and generation
                 else None)
        out[name] = {"scoring_seconds": seconds, "n_tokens": info.get("n_tokens"),
                     "max_tokens_per_sequence": info.get("max_tokens_per_sequence"),
                     "n_sequences": info.get("n_sequences"),
                     "prompts_restored": info.get("prompts_restored"),
                     "method": info.get("method"), "generation_seconds": generation,
                     "scoring_over_generation": ratio}
    return out


def _agreement(out: Path, ab: Mapping[str, Any], arm: str, base: str, confidence: float,
               samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    path = out / "arms" / arm / AGREEMENT_FILE
    recorded = _get(ab, "scoring", arm)
    why = _get(recorded, "error") or _get(recorded, "reason")
    if not path.exists():
        section = not_measured(f"{why}" if why else f"no {AGREEMENT_FILE} for arm {arm!r} "
                               "(the engine cannot score, or the A/B predates scoring)")
    else:
        try:
            section = summarize_agreement(rec.read_samples(path), confidence=confidence)
        except AbgateError as exc:
            section = not_measured(f"{path.name} is unreadable: {exc}")
    section["cost"] = _cost(ab, arm, base, samples)
    return section


def _probes_doc(out: Path, arm: str) -> tuple[Any, str | None]:
    path = out / "arms" / arm / PROBES_FILE
    if not path.exists():
        return None, f"no {PROBES_FILE} for arm {arm!r}"
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{PROBES_FILE} of arm {arm!r} is unreadable ({exc})"


def _probes(out: Path, arm: str, base: str) -> dict[str, Any] | None:
    """Both arms' probes side by side; None when neither arm ran probes."""
    if not any((out / "arms" / name / PROBES_FILE).exists() for name in (base, arm)):
        return None
    (base_doc, base_why), (cand_doc, cand_why) = _probes_doc(out, base), _probes_doc(out, arm)
    return compare_probes(base_doc, cand_doc, base_missing=base_why, cand_missing=cand_why)


def random_weights(ab: Mapping[str, Any], arm: str,
                   samples: Sequence[Mapping[str, Any]]) -> str | None:
    """Why ``arm`` runs random weights ("speed only"), or None."""
    for where, doc in (("effective config", _get(ab, "engines", arm, "effective_config")),
                       ("engine args", _get(ab, "experiment", "arms", arm, "engine_args"))):
        if _get(doc, "load_format") == "dummy":
            return f"arm {arm!r} runs random weights ({where}: load_format = \"dummy\"), " \
                   "speed only"
    if any(s.get("random_weights") for s in samples):
        return f"arm {arm!r} runs random weights (its samples say so), speed only"
    return None


def arm_extras(out: Path, ab: Mapping[str, Any], arm: str, base: str, confidence: float,
               samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """What a candidate's comparison gets besides the paired statistics: ``expect``,
    ``speed_only``, ``agreement``, ``difference_warnings`` and (when probes ran)
    ``probes``."""
    exp = ab["experiment"]
    speed_only = random_weights(ab, base, samples[base]) or random_weights(ab, arm,
                                                                          samples[arm])
    extras: dict[str, Any] = {
        "expect": exp.get("expect", "lossy"),
        "speed_only": speed_only,
        "agreement": _agreement(out, ab, arm, base, confidence, samples),
        # undeclared differences, an opt-out nothing shows: notes of the verdict
        "difference_warnings": declared.warnings(_get(ab, "differences", arm) or {}),
    }
    probes = _probes(out, arm, base)
    if probes is not None:
        extras["probes"] = probes
    return extras


def item_order(samples: Sequence[Mapping[str, Any]]) -> list[str]:
    """Item IDs in the order the samples were recorded (the sequence of a sequential
    A/B: appended in schedule order, so a resumed A/B keeps it)."""
    return list(dict.fromkeys(str(s.get("item_id")) for s in samples))


def sequential_for(out: Path, ab: Mapping[str, Any], arm: str, base: str, policy: Policy,
                   samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The sequential evaluation of one candidate from the saved records (the A/B's
    looks and the analysis both call this, so they agree on every look)."""
    sched = _get(ab, "experiment", "schedule") or {}  # max_items as run: ab.json's
    path = out / "arms" / arm / AGREEMENT_FILE
    ev = _get(ab, "experiment", "evidence") or {}
    rows = (rec.read_samples(path, repair=True) if path.exists()
            and ev.get("agreement", True) else None)
    speed_only = random_weights(ab, base, samples[base]) or random_weights(ab, arm,
                                                                          samples[arm])
    return sequential_section(samples[base], samples[arm], item_order(samples[base]), policy,
                              look_every=int(sched.get("look_every") or 1),
                              max_items=_get(ab, "sequential", "max_items"),
                              agreement=rows, speed_only=bool(speed_only),
                              arm_names=(base, arm))


def compare_arm(base: Sequence[Mapping[str, Any]], cand: Sequence[Mapping[str, Any]],
                policy: Policy, arm_names: tuple[str, str], extras: Mapping[str, Any], *,
                seed: int = 0, n_boot: int = 2000,
                allow_unmatched: bool = False) -> dict[str, Any]:
    """One candidate against the baseline: paired statistics, ``extras`` beside them, and
    the policy's verdict. ``abgate ab`` and ``abgate compare`` both call this, so the
    two can never disagree on the same samples. ``allow_unmatched``: an unfinished A/B,
    where an interruption may fall between the two arms' samples of one item, is
    compared on the keys both arms have."""
    comparison = compare_samples(base, cand, seed=seed, n_boot=n_boot, arm_names=arm_names,
                                 confidence=policy.speed.confidence,
                                 allow_unmatched=allow_unmatched)
    comparison.update(extras)
    verdict = decide(comparison, policy)
    return {"comparison": comparison, "verdict": verdict.to_dict()}


def analyze(out: Path, policy_path: str | None = None, seed: int = 0,
            n_boot: int = 2000) -> dict[str, Any]:
    """Compare every candidate arm against the baseline; write and return the result."""
    ab = read_record(out / "ab.json", "ab").to_dict()  # typed: AbRecord
    exp = ab["experiment"]
    policy = load_policy(policy_path if policy_path is not None else exp.get("policy"))
    base = exp["baseline"]
    samples = {arm: arm_samples(out, arm) for arm in exp["arms"]}
    comparisons: dict[str, Any] = {}
    for arm in exp["arms"]:
        if arm == base:
            continue
        extras = arm_extras(out, ab, arm, base, policy.speed.confidence, samples)
        if _get(exp, "schedule", "stopping") == "sequential":
            extras["sequential"] = sequential_for(out, ab, arm, base, policy, samples)
        comparisons[arm] = compare_arm(samples[base], samples[arm], policy, (base, arm),
                                       extras, seed=seed, n_boot=n_boot,
                                       allow_unmatched=ab["status"] != "complete")
    decisions = [c["verdict"]["decision"] for c in comparisons.values()]
    overall = next(d for d in DECISION_ORDER if d in decisions)
    if ab["status"] != "complete" and overall == "ACCEPT":
        overall = "INCONCLUSIVE"  # never accept on an unfinished run
    result = {
        "schema_version": rec.SCHEMA_VERSION,
        "kind": "ab-comparison",
        "ab_status": ab["status"],
        "baseline": base,
        "policy": policy.to_dict(),
        "comparisons": comparisons,
        "decision": overall,
        "exit_code": EXIT_CODES[overall],
    }
    rec.write_json_atomic(out / COMPARISON_FILE, result)
    return result
