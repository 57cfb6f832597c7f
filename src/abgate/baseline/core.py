"""``abgate baseline record`` / ``check``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from abgate.baseline.agreement import agreement, request_label
from abgate.baseline.report import CheckReport, CheckRow, ProbeCheck, SpeedRow
from abgate.bench import BenchConfig, default_probes, limits, prepare_bench, run_bench, run_probes
from abgate.bench.probes import DEFAULT_PROBE_NAMES, ProbeResult
from abgate.bench.run import CaseResult
from abgate.bench.samples import BenchSample
from abgate.compare.drift import configuration, drift
from abgate.compare.speed_check import compare_speed
from abgate.engines.base import Engine
from abgate.errors import AbgateError, UsageError
from abgate.host import host_info
from abgate.host_load import snapshot, summarize
from abgate.integrity import verify_file
from abgate.progress import Reporter
from abgate.records.bench_sections import BaselineCase, RequestRef
from abgate.records.documents import BaselineRecord, LoadFacts
from abgate.records.load_snapshots import BaselineHostLoad, HostLoadCheck, HostSnapshot
from abgate.records.sections import GitState, HostInfo
from abgate.runner.documents import new_spec_record, read_record, write_record
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
           ) -> tuple[list[BaselineCase], list[list[BenchSample]]]:
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
    return [_case(engine, cr, c.warmup) for cr in result.cases], \
        [cr.samples for cr in result.cases]


def _case(engine: Engine, cr: CaseResult, warmup: int) -> BaselineCase:
    """A case's record: the bench figures, the reference's top-k trace and prompt, the
    per-repeat speeds (for the noise-aware speed check, compare/speed_check.py) and
    every request."""
    first = cr.measured[0].output.token_ids if cr.measured else None
    return cr.figures(
        BaselineCase, top_k=_topk(engine, cr.prompt_ids, first), prompt_ids=cr.prompt_ids,
        decode_tps_values=[s.timing.steady_decode_tps for s in cr.measured],
        prefill_tps_values=[s.timing.prefill_tps for s in cr.measured],
        requests=[RequestRef(request=request_label(s, warmup), warmup=s.warmup,
                             output_sha256=s.output.sha256) for s in cr.samples])


def _probes(engine: Engine, c: BenchConfig,
            progress: Reporter | None = None) -> list[ProbeResult]:
    if not c.probes:
        return []
    probes = default_probes(engine.tokenize, needle_len=c.probe_len,
                            needle_depth=c.probe_depth, seed=c.probe_seed)
    return run_probes(engine, probes,
                      on_sample=progress.on_sample if progress is not None else None)


def record_baseline(c: BenchConfig, out: Path, *, force: bool = False,
                    provenance: ProvenanceOptions | None = None,
                    progress: Reporter | None = None,
                    git: GitState | None = None) -> BaselineRecord:
    """Record and seal ``baseline.json``. A case whose own warm-up or repeats disagree
    with its first measured repeat is no reference: the baseline is written ``failed``
    (a check refuses it) and an ``AbgateError`` names the first divergence. ``git``: the
    source tree's state as the caller found it (a replica records for a coordinator
    whose checkout it does not have); by default this process's working directory's."""
    p = prepare_bench(c)
    prov = provenance or ProvenanceOptions()
    contract = check_before_load(prov, p.engine)  # a refusal: exit 2, nothing written
    with claimed(out, resume=False, force=force, marker=BASELINE_FILE):
        prepare_new_dir(out, force, marker=BASELINE_FILE)
        where = {"git": git} if git is not None else {}
        doc = new_spec_record("baseline", p, out=out, recorded_at=time.time(),
                              not_certified=list(limits.BASELINE), **where)
        assert isinstance(doc, BaselineRecord)
        with loaded(p.engine, out, doc) as session, session.env():
            record_after_load(prov, contract, session, doc)
            # the host as the check sees it: after the load (what the GPUs hold then)
            doc.host = HostInfo.model_validate(host_info())
            load_before = snapshot("start")
            cases, samples = _cases(session.engine, c, progress)
            doc.host_load = _host_load(load_before, snapshot("end"))
            doc.probes = list(_probes(session.engine, c, progress))
        doc.cases = [case.model_copy(update={"repeat_agreement": agreement(
            case.output_token_ids, case.output_text, case_samples)})
            for case, case_samples in zip(cases, samples, strict=True)]
        problems = [_disagreement(case) for case in doc.cases
                    if case.repeat_agreement and not case.repeat_agreement.all_match]
        doc.status, doc.ended_at = ("failed" if problems else "complete"), time.time()
        doc.error = "; ".join(problems) or None
        doc.seal()
        write_record(out / BASELINE_FILE, doc)
    if problems:
        raise AbgateError(f"{out / BASELINE_FILE}: not a reference: {doc.error}")
    return doc


def _disagreement(case: BaselineCase) -> str:
    a = case.repeat_agreement
    assert a is not None and a.first_divergence is not None
    d = a.first_divergence
    return (f"case {case.label}: {a.summary}; {d.request} leaves the first repeat at "
            f"{d.unit} {d.position} (greedy decoding is not repeatable on this build)")


def config_from_record(doc: BaselineRecord, where: str = "baseline") -> BenchConfig:
    """The bench config a baseline was recorded with, through the same model as the
    flags' (``BenchConfig``): a damaged one is a one-line UsageError naming ``where``."""
    return BenchConfig.from_dict(doc.given_config(), f"{where}: config")


def read_baseline(path: Path) -> tuple[BaselineRecord, BenchConfig]:
    """``baseline.json`` and its bench config, with what the check relies on checked:
    a damaged file is a one-line UsageError naming it, not a traceback mid-check."""
    verify_file(path)  # the bytes on disk against their seal, before anything is read
    doc = read_record(path, "baseline", model=BaselineRecord)
    return doc, check_readable(path, doc)


def check_readable(path: Path, doc: BaselineRecord) -> BenchConfig:
    """What a check relies on in ``doc`` (read from ``path``): complete, its config and
    its probes; a one-line UsageError naming the file otherwise."""
    if doc.status != "complete":
        raise UsageError(f"{path}: status {doc.status!r}, not 'complete': "
                         f"{doc.error or 'an incomplete baseline'}; record it again")
    c = config_from_record(doc, str(path))
    # (the cases' and probes' fields are checked by read_record, against their models)
    names = tuple(probe.name for probe in doc.probes)
    if names != (DEFAULT_PROBE_NAMES if c.probes else ()):  # checked before the re-run
        raise UsageError(f"{path}: not a readable baseline (ValueError: " + (
            f"probes are {list(names)}, not the {len(DEFAULT_PROBE_NAMES)} abgate records"
            if c.probes else "probes were recorded with probes off") + ")")
    return c


def _host_load(before: HostSnapshot, after: HostSnapshot) -> BaselineHostLoad:
    """The host's load at the start and end of the cases (``abgate.host_load``): context
    for a speed comparison (a host that got busier between record and check runs slower
    for that alone)."""
    return BaselineHostLoad(before=before, after=after, summary=summarize([before, after]))


def _compare_case(engine: Engine, ref: BaselineCase, cur: BaselineCase,
                  samples: list[BenchSample], speed: SpeedRow) -> CheckRow:
    """The current warm-up(s) and every measured repeat against the recorded output."""
    by_ids = ref.output_token_ids is not None and cur.output_token_ids is not None
    ref_ids = ref.output_token_ids if by_ids else None
    found = agreement(ref_ids, ref.output_text, samples)
    div = found.first_divergence
    if div is not None and by_ids and ref.top_k and ref_ids and div.position < len(ref_ids):
        cur_topk = _topk(engine, ref.prompt_ids, ref_ids)
        if cur_topk:
            div = div.model_copy(update={
                "reference_in_current_top_k": div.reference_token in cur_topk[div.position],
                "current_in_reference_top_k": div.current_token in ref.top_k[div.position]})
    row = CheckRow(case=ref.label, prompt_sha256=cur.prompt_sha256,
                   compared_by="token IDs" if by_ids
                   else "text (the engine returns no output token IDs)",
                   tokens_match=found.all_match, repeats=found, speed=speed,
                   passed=found.all_match and speed.ok)
    # (a row without a divergence has no "divergence" key)
    return row if div is None else row.model_copy(update={"divergence": div})


def _speed_row(ref: BaselineCase, cur: BaselineCase, tolerance: float) -> SpeedRow:
    """Steady decode against the recorded repeats; with one output token (the context
    boundary case) decode is undefined and prefill tok/s is compared instead."""
    metric = "steady_decode_tps" if ref.output_len >= 2 else "prefill_tps"
    old, new = ref.speed.of(metric).median, cur.speed.of(metric).median
    # a baseline recorded before per-repeat values were kept has its median only
    recorded = ref.speed_values(metric) or [old]
    current = cur.speed_values(metric) or []
    check = compare_speed(recorded, current, tolerance)
    return SpeedRow(metric=metric, recorded_median=old, current_median=new,
                    recorded_values=recorded, current_values=current, tolerance=tolerance,
                    outcome=check.outcome, ratio=check.ratio, low=check.low, high=check.high,
                    recorded_spread=check.recorded_spread,
                    current_spread=check.current_spread, reason=check.reason, ok=check.ok)


def check_baseline(base_dir: Path, *, engine_args: dict[str, Any] | None = None,
                   tolerance: float = 0.10, repeats: int | None = None,
                   allow_diff: Sequence[str] = (), strict_volatile: bool = False,
                   provenance: ProvenanceOptions | None = None,
                   progress: Reporter | None = None) -> CheckReport:
    """Re-run the recorded cases: tokens (every warm-up and repeat), speed, probes, and
    the configuration against the recorded one (``compare/drift.py``: a difference
    outside ``allow_diff`` fails the check, naming the keys; volatile figures, such as
    the GPU memory in use, are listed apart and compared only with ``strict_volatile``).
    The host is taken after the load, as the record takes it."""
    path = base_dir / BASELINE_FILE
    if not path.exists():
        raise UsageError(f"{base_dir}: no {BASELINE_FILE}; record one with "
                         "'abgate baseline record'")
    doc, c = read_baseline(path)
    c = replace(c, engine_args={**c.engine_args, **(engine_args or {})},
                expect_prompt_sha=tuple(case.prompt_sha256 for case in doc.cases),
                input_lens=tuple(case.input_len for case in doc.cases))
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
        found = drift(configuration(doc),
                      configuration(now, spec=p.spec, host=host_info()), allow_diff,
                      strict_volatile=strict_volatile)
        report.configuration, report.provenance = found, now.provenance
        report.passed &= found.passed
        _check_cases(session.engine, c, doc, tolerance, report, progress)
    report.cleanup = now.cleanup  # a launched server's stop, verified (or not)
    return report


def _check_cases(engine: Engine, c: BenchConfig, doc: BaselineRecord, tolerance: float,
                 report: CheckReport, progress: Reporter | None = None) -> None:
    load_before = snapshot("start")
    current, samples = _cases(engine, c, progress)
    report.host_load = HostLoadCheck(recorded=doc.host_load,
                                     current=_host_load(load_before, snapshot("end")))
    for ref, cur, case_samples in zip(doc.cases, current, samples, strict=True):
        row = _compare_case(engine, ref, cur, case_samples, _speed_row(ref, cur, tolerance))
        report.cases.append(row)
        report.passed &= row.passed
    for old, new in zip(doc.probes, _probes(engine, c, progress), strict=True):
        ok = new.passed or not old.passed  # a probe the baseline failed may fail
        report.probes.append(ProbeCheck(name=new.name, recorded=old.passed,
                                        current=new.passed, reason=new.reason, ok=ok))
        report.passed &= ok
