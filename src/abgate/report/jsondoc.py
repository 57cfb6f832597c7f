"""The JSON report: one document with the comparison, the A/B's essentials and every
arm's summary, for tools that want the numbers without parsing Markdown."""

from __future__ import annotations

import json
import math
from typing import Any

from abgate.records.documents import SCHEMA_VERSIONS, AbRecord
from abgate.records.sections import Section
from abgate.report.blocks import Bullets
from abgate.report.contract import matched_contract
from abgate.report.limits import not_certified
from abgate.report.load import AbData
from abgate.report.untrusted import unmarked

RUN_KEYS = ("abgate_version", "git", "host", "started_at", "ended_at", "resumes", "error",
            "arm_spec_digests", "digest")


def _schedule(ab: AbRecord) -> dict[str, Any]:
    out = ab.schedule.model_dump(mode="json", exclude={"executed"})
    return {**out, "n_executed": len(ab.schedule.executed)}


def _dumped(section: Section | None) -> dict[str, Any] | None:
    return section.to_dict() if section is not None else None


def _arm(data: AbData, name: str) -> dict[str, Any]:
    arm, run = data.arms[name], data.arms[name].record
    prov = run.provenance if run is not None else None
    return {
        "status": run.status if run is not None else None,
        "spec_digest": run.spec_digest if run is not None else None,
        "engine": _dumped(data.record.engines.get(name)),
        "summary": _dumped(arm.stats),
        "bench": _dumped(arm.bench),
        "git": _dumped(run.git) if run is not None else None,
        "contract": _dumped(prov.contract) if prov is not None else None,
    }


def _not_certified(data: AbData) -> list[str]:
    return [unmarked(item) for block in not_certified(data) if isinstance(block, Bullets)
            for item in block.items]


def report_document(data: AbData) -> dict[str, Any]:
    record = data.record
    ab = record.to_dict()
    return {
        "schema_version": SCHEMA_VERSIONS["ab-report"],
        "kind": "ab-report",
        "experiment": record.experiment.to_dict(),
        "status": record.status,
        "baseline": data.baseline,
        "candidates": data.candidates,
        "decision": data.analysis.decision,
        "exit_code": data.analysis.exit_code,
        "verdicts": {arm: data.arm_verdict(arm).decision for arm in data.candidates},
        "run": {**{k: ab.get(k) for k in RUN_KEYS}, "schedule": _schedule(record)},
        "contract": unmarked(matched_contract(data).to_dict(list(data.arms))),
        "arms": {name: _arm(data, name) for name in data.ordered},
        "differences": {arm: d.to_dict() for arm, d in record.differences.items()},
        "comparison": data.analysis.to_json(),  # comparison.json as read
        "not_certified": _not_certified(data),
        "decisions": [d.model_dump() for d in data.decisions],
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
