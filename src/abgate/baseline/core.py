"""``abgate baseline record`` / ``check``."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abgate.baseline.agreement import agreement, request_label
from abgate.bench import BenchConfig, default_probes, limits, prepare_bench, run_bench, run_probes
from abgate.bench.probes import DEFAULT_PROBE_NAMES
from abgate.bench.samples import BenchSample
from abgate.compare.drift import configuration, drift
from abgate.compare.speed_check import compare_speed
from abgate.engines.base import Engine
from abgate.errors import AbgateError, UsageError, one_line
from abgate.host import host_info
from abgate.integrity import FIELD, seal, verify_seal
from abgate.progress import Reporter
from abgate.runner import records as rec
from abgate.runner.documents import BaselineRecord, LoadFacts, new_record, read_record, write_record
from abgate.runner.outdir import claimed, prepare_new_dir
from abgate.runner.provenance import ProvenanceOptions, check_before_load, record_after_load
from abgate.runner.session import loaded

BASELINE_FILE = "baseline.json"
TOP_K = 5


def _topk(engine: Engine, prompt: list[int], output: list[int] | None) -> list[list[int]] | None:
    if not output:
        return None
    return engine.topk_trace(prompt, output, TOP_K)


def _cases(engine: Engine, c: BenchConfig, progress: Reporter | None = None
           ) -> tuple[list[dict[str, Any]], list[list[BenchSample]]]:
    """Each case's record (the reference is its first measured repeat) and every request's
    sample, warm-ups first, for the agreement counts."""
    if progress is not None:
        n_probes = len(default_probes(engine.tokenize, needle_len=c.probe_len,
                                      needle_depth=c.probe_depth, seed=c.probe_seed)
                       ) if c.probes else 0
        progress.on_start(0, len(c.cases) * (c.warmup + c.repeats) + n_probes)
    result = run_bench(engine, c.cases, warmup=c.warmup, repeats=c.repeats,
                       prompt_seed=c.prompt_seed, expect_prompt_sha=c.expect_prompt_sha,
                       prompt=c.prompt,
                       on_sample=progress.on_sample if progress is not None else None)
    out = []
    for cr in result.cases:
        d = cr.to_dict(samples=False)
        d["top_k"] = _topk(engine, cr.prompt_ids, d["output_token_ids"])
        d["prompt_ids"] = cr.prompt_ids
        # per repeat, for the noise-aware speed check (compare/speed_check.py)
        d["decode_tps_values"] = [s.timing.steady_decode_tps for s in cr.measured]
        d["prefill_tps_values"] = [s.timing.prefill_tps for s in cr.measured]
        d["requests"] = [{"request": request_label(s, c.warmup), "warmup": s.warmup,
                          "output_sha256": s.output.sha256} for s in cr.samples]
        out.append(d)
    return out, [cr.samples for cr in result.cases]


def _probes(engine: Engine, c: BenchConfig,
            progress: Reporter | None = None) -> list[dict[str, Any]]:
    if not c.probes:
        return []
    probes = default_probes(engine.tokenize, needle_len=c.probe_len,
                            needle_depth=c.probe_depth, seed=c.probe_seed)
    return [r.to_dict() for r in run_probes(
        engine, probes, on_sample=progress.on_sample if progress is not None else None)]


def record_baseline(c: BenchConfig, out: Path, *, force: bool = False,
                    provenance: ProvenanceOptions | None = None,
                    progress: Reporter | None = None) -> BaselineRecord:
    """Record and seal ``baseline.json``. A case whose own warm-up or repeats disagree
    with its first measured repeat is no reference: the baseline is written ``failed``
    (a check refuses it) and an ``AbgateError`` names the first divergence."""
    p = prepare_bench(c)
    prov = provenance or ProvenanceOptions()
    contract = check_before_load(prov, p.engine)  # a refusal: exit 2, nothing written
    with claimed(out, resume=False, force=force, marker=BASELINE_FILE):
        prepare_new_dir(out, force, marker=BASELINE_FILE)
        doc = new_record("baseline", out=out, config=c.to_dict(), spec=p.spec,
                         spec_digest=p.spec_digest, recorded_at=time.time(),
                         not_certified=list(limits.BASELINE))
        assert isinstance(doc, BaselineRecord)
        with loaded(p.engine, out, doc) as session, session.env():
            record_after_load(prov, contract, session, doc)
            load_before = host_load()
            doc.cases, samples = _cases(session.engine, c, progress)
            doc.host_load = {"before": load_before, "after": host_load()}
            doc.probes = _probes(session.engine, c, progress)
        problems = []
        for case, case_samples in zip(doc.cases, samples, strict=True):
            case["repeat_agreement"] = agreement(case["output_token_ids"], case["output_text"],
                                                 case_samples)
            if not case["repeat_agreement"]["all_match"]:
                problems.append(_disagreement(case))
        doc.status, doc.ended_at = ("failed" if problems else "complete"), time.time()
        doc.error = "; ".join(problems) or None
        doc.integrity = seal(doc.to_dict())[FIELD]
        write_record(out / BASELINE_FILE, doc)
    if problems:
        raise AbgateError(f"{out / BASELINE_FILE}: not a reference: {doc.error}")
    return doc


def _disagreement(case: dict[str, Any]) -> str:
    a = case["repeat_agreement"]
    d = a["first_divergence"]
    return (f"case {case['input_len']}/{case['output_len']}: {a['summary']}; {d['request']} "
            f"leaves the first repeat at {d['unit']} {d['position']} (greedy decoding is "
            "not repeatable on this build)")


def config_from_record(doc: BaselineRecord, where: str = "baseline") -> BenchConfig:
    """The bench config a baseline was recorded with, through the same model as the
    flags' (``BenchConfig``): a damaged one is a one-line UsageError naming ``where``."""
    return BenchConfig.from_dict(dict(doc.config), f"{where}: config")


_CASE = {"input_len": int, "output_len": int, "prompt_sha256": str, "speed": dict,
         "prompt_ids": list}


def read_baseline(path: Path) -> tuple[BaselineRecord, BenchConfig]:
    """``baseline.json`` and its bench config, with what the check relies on checked:
    a damaged file is a one-line UsageError naming it, not a traceback mid-check."""
    doc = read_record(path, "baseline", model=BaselineRecord)
    verify_seal(path, rec.read_json(path))  # the file's own bytes, as sealed
    if doc.status != "complete":
        raise UsageError(f"{path}: status {doc.status!r}, not 'complete': "
                         f"{doc.error or 'an incomplete baseline'}; record it again")
    c = config_from_record(doc, str(path))
    try:
        cases, probes = doc.cases, doc.probes
        _expect("cases", cases, list)
        _expect("probes", probes, list)
        for i, case in enumerate(cases):
            for key, kind in _CASE.items():
                _expect(f"cases[{i}].{key}", case[key], kind)
            _expect(f"cases[{i}].speed.steady_decode_tps", case["speed"]["steady_decode_tps"],
                    dict)
            for key in ("output_token_ids", "decode_tps_values"):
                _expect(f"cases[{i}].{key}", case.get(key), (list, type(None)))
        for i, probe in enumerate(probes):
            _expect(f"probes[{i}].passed", probe["passed"], bool)
        names = tuple(probe["name"] for probe in probes)
        if names != (DEFAULT_PROBE_NAMES if c.probes else ()):  # checked before the re-run
            raise ValueError(f"probes are {list(names)}, not the {len(DEFAULT_PROBE_NAMES)} "
                             "abgate records" if c.probes else "probes were recorded with "
                             "probes off")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path}: not a readable baseline ({type(exc).__name__}: "
                         f"{one_line(exc)})") from None
    return doc, c


def _expect(where: str, value: Any, kind: type | tuple[type, ...]) -> None:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{where} is {type(value).__name__}")


def host_load() -> dict[str, Any]:
    """The 1-minute load average against the cores: context for a speed comparison (a
    host that got busier between record and check runs slower for that alone)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"load_1min": load, "cpus": os.cpu_count()}


@dataclass
class CheckReport:
    passed: bool = True
    cases: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    host_load: dict[str, Any] = field(default_factory=dict)
    configuration: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    cleanup: dict[str, Any] | None = None

    @property
    def speed_inconclusive(self) -> bool:
        return any(c["speed"]["outcome"] == "inconclusive" for c in self.cases)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "speed_inconclusive": self.speed_inconclusive,
                "configuration": self.configuration, "cases": self.cases,
                "probes": self.probes, "host_load": self.host_load,
                "provenance": self.provenance, "cleanup": self.cleanup,
                "not_certified": list(limits.BASELINE)}


def _compare_case(engine: Engine, ref: dict[str, Any], cur: dict[str, Any],
                  samples: list[BenchSample]) -> dict[str, Any]:
    """The current warm-up(s) and every measured repeat against the recorded output."""
    row: dict[str, Any] = {"case": f"{ref['input_len']}/{ref['output_len']}",
                           "prompt_sha256": cur["prompt_sha256"]}
    by_ids = ref["output_token_ids"] is not None and cur["output_token_ids"] is not None
    row["compared_by"] = ("token IDs" if by_ids
                          else "text (the engine returns no output token IDs)")
    ref_ids = ref["output_token_ids"] if by_ids else None
    found = agreement(ref_ids, ref.get("output_text"), samples)
    row |= {"tokens_match": found["all_match"], "repeats": found}
    div = found["first_divergence"]
    if div is not None:
        row["divergence"] = dict(div)
        pos, ref_tok, cur_tok = div["position"], div["reference_token"], div["current_token"]
        cur_topk = _topk(engine, ref["prompt_ids"], ref_ids) if by_ids else None
        if by_ids and ref.get("top_k") and cur_topk and pos < len(ref_ids or ()):
            row["divergence"]["reference_in_current_top_k"] = ref_tok in cur_topk[pos]
            row["divergence"]["current_in_reference_top_k"] = cur_tok in ref["top_k"][pos]
    return row


def _speed_row(row: dict[str, Any], ref: dict[str, Any], cur: dict[str, Any],
               tolerance: float) -> dict[str, Any]:
    """Steady decode against the recorded repeats; with one output token (the context
    boundary case) decode is undefined and prefill tok/s is compared instead."""
    metric, values = (("steady_decode_tps", "decode_tps_values") if ref["output_len"] >= 2
                      else ("prefill_tps", "prefill_tps_values"))
    old = ref["speed"][metric].get("median")
    new = cur["speed"][metric].get("median")
    # a baseline recorded before per-repeat values were kept has its median only
    recorded = ref.get(values) or [old]
    check = compare_speed(recorded, cur[values], tolerance)
    row["speed"] = {"metric": metric, "recorded_median": old, "current_median": new,
                    "recorded_values": recorded, "current_values": cur[values],
                    "tolerance": tolerance, **check.to_dict()}
    row["passed"] = row["tokens_match"] and check.ok
    return row


def check_baseline(base_dir: Path, *, engine_args: dict[str, Any] | None = None,
                   tolerance: float = 0.10, repeats: int | None = None,
                   allow_diff: Sequence[str] = (),
                   provenance: ProvenanceOptions | None = None,
                   progress: Reporter | None = None) -> CheckReport:
    """Re-run the recorded cases: tokens (every warm-up and repeat), speed, probes, and
    the configuration against the recorded one (``compare/drift.py``: a difference
    outside ``allow_diff`` fails the check, naming the keys)."""
    path = base_dir / BASELINE_FILE
    if not path.exists():
        raise UsageError(f"{base_dir}: no {BASELINE_FILE}; record one with "
                         "'abgate baseline record'")
    doc, c = read_baseline(path)
    c = replace(c, engine_args={**c.engine_args, **(engine_args or {})},
                expect_prompt_sha=tuple(case["prompt_sha256"] for case in doc.cases),
                input_lens=tuple(case["input_len"] for case in doc.cases))
    if repeats is not None:
        if repeats < 1:
            raise UsageError(f"--repeats must be >= 1, got {repeats}")
        c = replace(c, repeats=repeats)
    p = prepare_bench(c)
    prov = provenance or ProvenanceOptions()
    contract = check_before_load(prov, p.engine)
    report = CheckReport()
    now = LoadFacts()
    with loaded(p.engine, None, now) as session, session.env():
        record_after_load(prov, contract, session, now)
        found = drift(configuration(doc.to_dict()), configuration(
            {"spec": p.spec, "host": host_info(), **now.to_dict()}), allow_diff)
        report.configuration = found.to_dict()
        report.provenance = now.provenance.to_dict() if now.provenance else {}
        report.passed &= found.passed
        _check_cases(session.engine, c, doc, tolerance, report, progress)
    report.cleanup = now.cleanup  # a launched server's stop, verified (or not)
    return report


def _check_cases(engine: Engine, c: BenchConfig, doc: BaselineRecord, tolerance: float,
                 report: CheckReport, progress: Reporter | None = None) -> None:
    load_before = host_load()
    current, samples = _cases(engine, c, progress)
    report.host_load = {"recorded": doc.host_load,
                        "current": {"before": load_before, "after": host_load()}}
    for ref, cur, case_samples in zip(doc.cases, current, samples, strict=True):
        row = _speed_row(_compare_case(engine, ref, cur, case_samples), ref, cur, tolerance)
        report.cases.append(row)
        report.passed &= row["passed"]
    for old, new in zip(doc.probes, _probes(engine, c, progress), strict=True):
        ok = new["passed"] or not old["passed"]  # a probe the baseline failed may fail
        report.probes.append({"name": new["name"], "recorded": old["passed"],
                              "current": new["passed"], "reason": new["reason"], "ok": ok})
        report.passed &= ok
