"""From a finished (or partial) A/B directory to ``comparison.json``: paired
statistics and a verdict per candidate arm, computed from the saved samples only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abgate.compare import compare_samples, decide, load_policy
from abgate.runner import records as rec

COMPARISON_FILE = "comparison.json"
DECISION_ORDER = ("REJECT", "INCONCLUSIVE", "ACCEPT")  # worst first
EXIT_CODES = {"ACCEPT": 0, "REJECT": 1, "INCONCLUSIVE": 3}


def arm_samples(out: Path, arm: str) -> list[dict[str, Any]]:
    path = out / "arms" / arm / rec.SAMPLES_FILE
    return [s for s in rec.read_samples(path) if not s.get("warmup")]


def analyze(out: Path, policy_path: str | None = None, seed: int = 0,
            n_boot: int = 2000) -> dict[str, Any]:
    """Compare every candidate arm against the baseline; write and return the result."""
    ab = rec.read_json(out / "ab.json")
    exp = ab["experiment"]
    policy = load_policy(policy_path if policy_path is not None else exp.get("policy"))
    base = exp["baseline"]
    base_samples = arm_samples(out, base)
    comparisons: dict[str, Any] = {}
    for arm in exp["arms"]:
        if arm == base:
            continue
        comparison = compare_samples(base_samples, arm_samples(out, arm), seed=seed,
                                     n_boot=n_boot, arm_names=(base, arm),
                                     confidence=policy.speed.confidence)
        verdict = decide(comparison, policy)
        comparisons[arm] = {"comparison": comparison, "verdict": verdict.to_dict()}
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
