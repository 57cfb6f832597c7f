"""The JSON report: one document with the comparison, the A/B's essentials and every
arm's summary, for tools that want the numbers without parsing Markdown."""

from __future__ import annotations

import json
import math
from typing import Any

from abgate.report.blocks import Bullets
from abgate.report.contract import matched_contract
from abgate.report.fmt import dig
from abgate.report.limits import not_certified
from abgate.report.load import AbData
from abgate.runner.records import SCHEMA_VERSION

RUN_KEYS = ("abgate_version", "git", "host", "started_at", "ended_at", "resumes", "error",
            "arm_spec_digests", "digest")


def _schedule(ab: dict[str, Any]) -> Any:
    schedule = ab.get("schedule")
    if not isinstance(schedule, dict):
        return schedule
    out = {k: v for k, v in schedule.items() if k != "executed"}
    executed = schedule.get("executed")
    out["n_executed"] = len(executed) if isinstance(executed, list) else None
    return out


def _arm(data: AbData, name: str) -> dict[str, Any]:
    arm = data.arms[name]
    return {
        "status": arm.run.get("status"),
        "spec_digest": arm.run.get("spec_digest"),
        "engine": dig(data.ab, "engines", name),
        "summary": arm.summary or None,
        "bench": arm.bench,
        "git": arm.run.get("git"),
        "contract": dig(arm.run, "provenance", "contract"),
    }


def _not_certified(data: AbData) -> list[str]:
    return [item for block in not_certified(data) if isinstance(block, Bullets)
            for item in block.items]


def report_document(data: AbData) -> dict[str, Any]:
    ab = data.ab
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "ab-report",
        "experiment": ab.get("experiment"),
        "status": ab.get("status"),
        "baseline": data.baseline,
        "candidates": data.candidates,
        "decision": data.analysis.decision,
        "exit_code": data.analysis.exit_code,
        "verdicts": {arm: data.arm_verdict(arm).decision for arm in data.candidates},
        "run": {**{k: ab.get(k) for k in RUN_KEYS}, "schedule": _schedule(ab)},
        "contract": matched_contract(data).to_dict(list(data.arms)),
        "arms": {name: _arm(data, name) for name in data.ordered},
        "differences": ab.get("differences"),
        "comparison": data.analysis.to_json(),  # comparison.json as read
        "not_certified": _not_certified(data),
        "decisions": data.decisions,
    }


def _finite(value: Any) -> Any:
    """NaN and infinities (which JSON lacks) as null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render_json(data: AbData) -> str:
    return json.dumps(_finite(report_document(data)), indent=2, ensure_ascii=False,
                      allow_nan=False) + "\n"
