"""The JSON report: one document with the comparison, the A/B's essentials and every
arm's summary, for tools that want the numbers without parsing Markdown."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel

from abgate.records.documents import AbExperiment, AbRecord, current_version
from abgate.records.engine import LoadedEngine
from abgate.records.sections import ArmDifferences, ContractRecord, GitState
from abgate.records.side_documents import AbBenchDocument, DecisionRecord, Summary
from abgate.report.blocks import Bullets
from abgate.report.contract import matched_contract
from abgate.report.limits import not_certified
from abgate.report.load import AbData
from abgate.report.untrusted import unmarked

RUN_KEYS = ("abgate_version", "git", "host", "started_at", "ended_at", "resumes", "error",
            "arm_spec_digests", "digest")


class ReportArm(BaseModel):
    """One arm in ``report.json``: its run.json's status, spec digest, git and contract
    outcome, the engine it loaded, its summary and bench (None where it has none)."""

    status: str | None
    spec_digest: str | None
    engine: LoadedEngine | None
    summary: Summary | None
    bench: AbBenchDocument | None
    git: GitState | None
    contract: ContractRecord | None


class ReportDocument(BaseModel):
    """``report.json``: the comparison, the A/B's essentials and every arm, built from
    the record models and written as JSON once (:func:`render_json`)."""

    schema_version: int
    kind: str
    experiment: AbExperiment
    status: str | None
    baseline: str
    candidates: list[str]
    decision: str | None
    exit_code: int | None
    verdicts: dict[str, str | None]
    run: dict[str, Any]  # RUN_KEYS of ab.json (their models), then the schedule
    contract: dict[str, Any]
    arms: dict[str, ReportArm]
    differences: dict[str, ArmDifferences]
    comparison: dict[str, Any]  # comparison.json as read
    not_certified: list[str]
    decisions: list[DecisionRecord]


def _schedule(ab: AbRecord) -> dict[str, Any]:
    out = ab.schedule.model_dump(mode="json", exclude={"executed"})
    return {**out, "n_executed": len(ab.schedule.executed)}


def _arm(data: AbData, name: str) -> ReportArm:
    arm, run = data.arms[name], data.arms[name].record
    prov = run.provenance if run is not None else None
    return ReportArm(
        status=run.status if run is not None else None,
        spec_digest=run.spec_digest if run is not None else None,
        engine=data.record.engines.get(name), summary=arm.stats, bench=arm.bench,
        git=run.git if run is not None else None,
        contract=prov.contract if prov is not None else None)


def _not_certified(data: AbData) -> list[str]:
    return [unmarked(item) for block in not_certified(data) if isinstance(block, Bullets)
            for item in block.items]


def report_document(data: AbData) -> ReportDocument:
    record = data.record
    return ReportDocument(
        schema_version=current_version("ab-report"), kind="ab-report",
        experiment=record.experiment, status=record.status, baseline=data.baseline,
        candidates=data.candidates, decision=data.analysis.decision,
        exit_code=data.analysis.exit_code,
        verdicts={arm: data.arm_verdict(arm).decision for arm in data.candidates},
        run={**{k: getattr(record, k) for k in RUN_KEYS}, "schedule": _schedule(record)},
        contract=unmarked(matched_contract(data).to_dict(list(data.arms))),
        arms={name: _arm(data, name) for name in data.ordered},
        differences=dict(record.differences),
        comparison=data.analysis.to_json(),  # comparison.json as read
        not_certified=_not_certified(data), decisions=list(data.decisions))


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
    doc = report_document(data).model_dump(mode="json")  # the one conversion, at the edge
    return json.dumps(_finite(doc), indent=2, ensure_ascii=False,
                      allow_nan=False) + "\n"
