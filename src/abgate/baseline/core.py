"""``abgate baseline record`` / ``check``."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abgate.bench import BenchConfig, default_probes, prepare_bench, run_bench, run_probes
from abgate.compare.speed_check import compare_speed
from abgate.engines.base import Engine
from abgate.errors import UsageError, one_line
from abgate.progress import Reporter
from abgate.runner import records as rec
from abgate.runner.documents import new_record, read_record, write_record
from abgate.runner.provenance import ProvenanceOptions, record_after_load
from abgate.runner.session import loaded

BASELINE_FILE = "baseline.json"
TOP_K = 5


def _topk(engine: Engine, prompt: list[int], output: list[int] | None) -> list[list[int]] | None:
    trace = getattr(engine, "topk_trace", None)
    if trace is None or not output:
        return None
    return trace(prompt, output, TOP_K)  # type: ignore[no-any-return]


def _cases(engine: Engine, c: BenchConfig,
           progress: Reporter | None = None) -> list[dict[str, Any]]:
    if progress is not None:
        n_probes = len(default_probes(engine.tokenize, needle_len=c.probe_len,
                                      needle_depth=c.probe_depth, seed=c.probe_seed)
                       ) if c.probes else 0
        progress.on_start(0, len(c.cases) * (c.warmup + c.repeats) + n_probes)
    result = run_bench(engine, c.cases, warmup=c.warmup, repeats=c.repeats,
                       prompt_seed=c.prompt_seed, expect_prompt_sha=c.expect_prompt_sha,
                       on_sample=progress.on_sample if progress is not None else None)
    out = []
    for cr in result.cases:
        d = cr.to_dict(samples=False)
        d["top_k"] = _topk(engine, cr.prompt_ids, d["output_token_ids"])
        d["prompt_ids"] = cr.prompt_ids
        # per repeat, for the noise-aware speed check (compare/speed_check.py)
        d["decode_tps_values"] = [s["timing"]["steady_decode_tps"] for s in cr.measured]
        out.append(d)
    return out


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
                    progress: Reporter | None = None) -> dict[str, Any]:
    p = prepare_bench(c)
    rec.prepare_new_dir(out, force, marker=BASELINE_FILE)
    doc = new_record("baseline", config=c.to_dict(), spec=p.spec, spec_digest=p.spec_digest,
                     recorded_at=time.time())
    with loaded(p.engine, out, doc) as session, session.env():
        record_after_load(provenance or ProvenanceOptions(), None, session, doc)
        load_before = host_load()
        doc["cases"] = _cases(session.engine, c, progress)
        doc["host_load"] = {"before": load_before, "after": host_load()}
        doc["probes"] = _probes(session.engine, c, progress)
    doc["status"], doc["ended_at"] = "complete", time.time()
    write_record(out / BASELINE_FILE, doc)
    return doc


def config_from_record(doc: dict[str, Any]) -> BenchConfig:
    d = dict(doc["config"])
    d["input_lens"] = tuple(None if n == "max" else n for n in d["input_lens"])
    d["expect_prompt_sha"] = tuple(d.get("expect_prompt_sha", ()))
    return BenchConfig(**d)


_CASE = {"input_len": int, "output_len": int, "prompt_sha256": str, "speed": dict,
         "prompt_ids": list}
_CONFIG = {"engine": str, "engine_args": dict, "env": dict, "engine_options": dict,
           "output_len": int, "warmup": int, "repeats": int, "prompt_seed": int,
           "probes": bool, "probe_len": int}


def read_baseline(path: Path) -> tuple[dict[str, Any], BenchConfig]:
    """``baseline.json`` and its bench config, with what the check relies on checked:
    a damaged file is a one-line UsageError naming it, not a traceback mid-check."""
    doc = read_record(path, "baseline")
    try:
        c = config_from_record(doc)
        for key, kind in _CONFIG.items():
            _expect(f"config.{key}", getattr(c, key), kind)
        cases, probes = doc["cases"], doc["probes"]
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

    @property
    def speed_inconclusive(self) -> bool:
        return any(c["speed"]["outcome"] == "inconclusive" for c in self.cases)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "speed_inconclusive": self.speed_inconclusive,
                "cases": self.cases, "probes": self.probes, "host_load": self.host_load}


def first_divergence(ref: Sequence[object], cur: Sequence[object]) -> int | None:
    for i, (a, b) in enumerate(zip(ref, cur, strict=False)):
        if a != b:
            return i
    return None if len(ref) == len(cur) else min(len(ref), len(cur))


def _compare_case(engine: Engine, ref: dict[str, Any], cur: dict[str, Any],
                  tolerance: float) -> dict[str, Any]:
    row: dict[str, Any] = {"case": f"{ref['input_len']}/{ref['output_len']}",
                           "prompt_sha256": cur["prompt_sha256"]}
    if ref["output_token_ids"] is None or cur["output_token_ids"] is None:
        # the engine returns no output token IDs (some servers): the text must match
        same = ref.get("output_text") == cur.get("output_text") is not None
        row |= {"compared_by": "text (the engine returns no output token IDs)",
                "tokens_match": same}
        pos = None if same else first_divergence(list(ref.get("output_text") or ""),
                                                 list(cur.get("output_text") or ""))
        if pos is not None:
            row["divergence"] = {"position": pos, "unit": "character",
                                 "reference_token": None, "current_token": None}
        return _speed_row(row, ref, cur, tolerance)
    ref_ids, cur_ids = ref["output_token_ids"], cur["output_token_ids"]
    pos = first_divergence(ref_ids, cur_ids)
    row |= {"compared_by": "token IDs", "tokens_match": pos is None}
    if pos is not None:
        ref_tok = ref_ids[pos] if pos < len(ref_ids) else None
        cur_tok = cur_ids[pos] if pos < len(cur_ids) else None
        row["divergence"] = {"position": pos, "reference_token": ref_tok, "current_token": cur_tok}
        cur_topk = _topk(engine, ref["prompt_ids"], ref_ids)
        if ref.get("top_k") and cur_topk and pos < len(ref_ids):
            row["divergence"]["reference_in_current_top_k"] = ref_tok in cur_topk[pos]
            row["divergence"]["current_in_reference_top_k"] = cur_tok in ref["top_k"][pos]
    return _speed_row(row, ref, cur, tolerance)


def _speed_row(row: dict[str, Any], ref: dict[str, Any], cur: dict[str, Any],
               tolerance: float) -> dict[str, Any]:
    old = ref["speed"]["steady_decode_tps"].get("median")
    new = cur["speed"]["steady_decode_tps"].get("median")
    # a baseline recorded before per-repeat values were kept has its median only
    recorded = ref.get("decode_tps_values") or [old]
    check = compare_speed(recorded, cur["decode_tps_values"], tolerance)
    row["speed"] = {"recorded_decode_tps": old, "current_decode_tps": new,
                    "recorded_values": recorded, "current_values": cur["decode_tps_values"],
                    "tolerance": tolerance, **check.to_dict()}
    row["passed"] = row["tokens_match"] and check.ok
    return row


def check_baseline(base_dir: Path, *, engine_args: dict[str, Any] | None = None,
                   tolerance: float = 0.10, repeats: int | None = None,
                   progress: Reporter | None = None) -> CheckReport:
    path = base_dir / BASELINE_FILE
    if not path.exists():
        raise UsageError(f"{base_dir}: no {BASELINE_FILE}; record one with "
                         "'abgate baseline record'")
    doc, c = read_baseline(path)
    c = replace(c, engine_args={**c.engine_args, **(engine_args or {})},
                expect_prompt_sha=tuple(case["prompt_sha256"] for case in doc["cases"]),
                input_lens=tuple(case["input_len"] for case in doc["cases"]))
    if repeats is not None:
        if repeats < 1:
            raise UsageError(f"--repeats must be >= 1, got {repeats}")
        c = replace(c, repeats=repeats)
    p = prepare_bench(c)
    report = CheckReport()
    with loaded(p.engine) as session, session.env():
        engine = session.engine
        load_before = host_load()
        current = _cases(engine, c, progress)
        report.host_load = {"recorded": doc.get("host_load"),
                            "current": {"before": load_before, "after": host_load()}}
        for ref, cur in zip(doc["cases"], current, strict=True):
            row = _compare_case(engine, ref, cur, tolerance)
            report.cases.append(row)
            report.passed &= row["passed"]
        for old, new in zip(doc["probes"], _probes(engine, c, progress), strict=True):
            ok = new["passed"] or not old["passed"]  # a probe the baseline failed may fail
            report.probes.append({"name": new["name"], "recorded": old["passed"],
                                  "current": new["passed"], "reason": new["reason"],
                                  "ok": ok})
            report.passed &= ok
    return report
