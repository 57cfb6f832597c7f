"""A bench's ``summary.json`` cases and ``baseline.json``'s cases and probes are typed
(``records.bench_sections``), and so are ``baseline check``'s rows (``baseline.report``):
the writers build the models, the files read back into equal models, the keys stay in
the order abgate has always written them, and older version-1 records (written before
some fields existed) read and write back with the keys they had."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from abgate.baseline import check_baseline, record_baseline
from abgate.baseline.report import CheckRow, ProbeCheck
from abgate.bench import BenchConfig, execute_bench, prepare_bench
from abgate.errors import AbgateError, UsageError
from abgate.records.bench_sections import (
    BaselineCase,
    BenchProbes,
    BenchSummaryCase,
    Divergence,
    ProbeRecord,
    RepeatAgreement,
    RequestRef,
    Roofline,
)
from abgate.records.documents import BaselineRecord
from abgate.records.side_documents import BenchSummary
from abgate.runner import records as rec
from abgate.runner.documents import read_document, read_record

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ["input_len", "output_len", "prompt_tokens", "prompt_sha256", "output_token_ids",
           "output_sha256", "output_text", "output_text_sha256", "outputs_identical",
           "warmup_identical", "n_warmup", "n", "concurrency", "throughput_tps", "speed",
           "itl_ms", "fidelity", "counts_match"]
BASELINE_KEYS = [*FIGURES, "top_k", "prompt_ids", "decode_tps_values", "prefill_tps_values",
                 "requests", "repeat_agreement"]
ROW_KEYS = ["case", "prompt_sha256", "compared_by", "tokens_match", "repeats", "divergence",
            "speed", "passed"]


def _config(**more: object) -> BenchConfig:
    return BenchConfig(engine="fake", input_lens=(32, 48), output_len=8, warmup=1, repeats=2,
                       probe_len=64, **more)  # type: ignore[arg-type]


def test_a_bench_summary_reads_back_as_the_models_it_was_written_from(tmp_path: Path) -> None:
    outcome = execute_bench(prepare_bench(_config(probes=True, peak_bw_gbps=10.0)),
                            tmp_path / "b")
    made = outcome.summary
    assert outcome.status == "complete" and made is not None
    read = read_document(tmp_path / "b" / rec.SUMMARY_FILE, BenchSummary)
    assert read == made and read.to_dict() == made.to_dict()
    assert [c.input_len for c in read.cases] == [32, 48]
    for case in read.cases:
        assert isinstance(case, BenchSummaryCase) and isinstance(case.roofline, Roofline)
        assert case.n == 2 and case.n_warmup == 1 and case.batch_size == 1
        assert case.speed.steady_decode_tps.n == 2 and case.speed.of("ttft_s").n == 2
        assert case.roofline.peak_gbps == 10.0  # the declared peak
        assert case.roofline.decode_tps == case.speed.steady_decode_tps.median
        assert case.output_token_ids is not None and len(case.output_token_ids) == 8
    assert isinstance(read.probes, BenchProbes) and read.probes.n == 3
    assert all(isinstance(r, ProbeRecord) for r in read.probes.results)
    assert read.probes.n_passed == sum(r.passed for r in read.probes.results)
    on_disk = json.loads((tmp_path / "b" / rec.SUMMARY_FILE).read_text())
    assert list(on_disk["cases"][0]) == [*FIGURES, "roofline"]
    assert list(on_disk["cases"][0]["roofline"]) == list(Roofline.model_fields)


def test_a_bench_that_did_not_complete_has_no_roofline(tmp_path: Path) -> None:
    config = BenchConfig(engine="fake", engine_args={"error_rate": 1.0}, input_lens=(32,),
                         output_len=8, warmup=1, repeats=2, peak_bw_gbps=10.0)
    with pytest.raises(AbgateError, match="the engine failed"):
        execute_bench(prepare_bench(config), tmp_path / "b")
    read = read_document(tmp_path / "b" / rec.SUMMARY_FILE, BenchSummary)
    assert read.status != "complete"
    assert all(c.roofline is None and "roofline" not in c.to_dict() for c in read.cases)


def test_a_baseline_reads_back_as_the_models_it_was_written_from(tmp_path: Path) -> None:
    made = record_baseline(_config(probes=True), tmp_path / "bl")
    read = read_record(tmp_path / "bl" / "baseline.json", "baseline", model=BaselineRecord)
    assert read.to_dict() == made.to_dict()
    assert read.cases == made.cases and read.probes == made.probes
    on_disk = json.loads((tmp_path / "bl" / "baseline.json").read_text())
    assert list(on_disk["cases"][0]) == BASELINE_KEYS
    for case in read.cases:
        assert isinstance(case, BaselineCase) and isinstance(case.repeat_agreement, RepeatAgreement)
        assert case.repeat_agreement.all_match and case.repeat_agreement.first_divergence is None
        assert case.repeat_agreement.summary == "2/2 repeats and the warm-up match"
        assert case.requests is not None and all(isinstance(r, RequestRef) for r in case.requests)
        assert [r.request for r in case.requests] == ["warm-up 1", "repeat 1", "repeat 2"]
        assert case.top_k is not None and [t[0] for t in case.top_k] == case.output_token_ids
        assert case.speed_values("steady_decode_tps") == case.decode_tps_values
        assert len(case.decode_tps_values or []) == 2
    assert [p.name for p in read.probes] == ["arithmetic", "copy", "needle"]
    assert all(isinstance(p, ProbeRecord) for p in read.probes)


def test_the_check_report_rows_are_typed(tmp_path: Path) -> None:
    record_baseline(_config(probes=True), tmp_path / "bl")
    same = check_baseline(tmp_path / "bl", tolerance=1.0)
    assert same.passed and all(isinstance(r, CheckRow) for r in same.cases)
    assert all(r.divergence is None and "divergence" not in r.to_dict() for r in same.cases)
    assert [p.name for p in same.probes] == ["arithmetic", "copy", "needle"]
    assert all(isinstance(p, ProbeCheck) and p.ok for p in same.probes)
    changed = check_baseline(tmp_path / "bl", engine_args={"perturb": 5.0}, tolerance=1.0)
    assert not changed.passed
    row = changed.cases[0]
    assert not row.tokens_match and not row.passed and row.speed.metric == "steady_decode_tps"
    assert isinstance(row.divergence, Divergence) and row.divergence.unit == "token"
    assert row.divergence.reference_in_current_top_k is not None  # the top-k cross-check
    assert row.repeats.first_divergence is not None
    assert row.repeats.first_divergence.reference_in_current_top_k is None  # as recorded
    written = changed.document().to_dict()  # the --json report
    assert list(written["cases"][0]) == ROW_KEYS
    assert json.loads(json.dumps(written))["cases"][0]["speed"]["outcome"] == "ok"


def test_the_parts_are_frozen_and_keep_unknown_keys() -> None:
    golden = ROOT / "tests" / "data" / "golden" / "v1"
    doc = read_record(golden / "baseline" / "baseline.json", "baseline", model=BaselineRecord)
    case = doc.cases[0]
    with pytest.raises(ValidationError):
        case.input_len = 1  # type: ignore[misc]
    newer = BaselineCase.model_validate({**case.to_dict(), "from_a_newer_minor": [1]})
    assert newer.to_dict()["from_a_newer_minor"] == [1]
    assert list(newer.to_dict())[-1] == "from_a_newer_minor"


def _committed(suffix: str) -> list[Path]:
    names = subprocess.run(["git", "ls-files", f"*{suffix}"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return [ROOT / n for n in names if (ROOT / n).parent.joinpath("run.json").exists()
            or n.endswith("baseline.json")]


def test_older_version_1_records_read_and_keep_their_keys() -> None:
    """Bench summaries and baselines committed under benchmarks/results/ were written
    before some fields existed (no output_text, concurrency, per-repeat values,
    requests, ...): they read into the models and write back the keys they had."""
    seen = 0
    for path in _committed("summary.json") + _committed("baseline.json"):
        raw = json.loads(path.read_text())
        if raw.get("kind") == "baseline":
            doc = read_record(path, "baseline", model=BaselineRecord)
            assert [c.to_dict() for c in doc.cases] == raw["cases"], path
            assert [p.to_dict() for p in doc.probes] == raw["probes"], path
        elif raw.get("kind") == "bench":
            summary = read_document(path, BenchSummary)
            assert summary.to_dict() == raw, path
        else:
            continue
        seen += 1
    assert seen >= 8  # (the committed bench and baseline records)


def test_a_damaged_case_is_one_error_naming_the_field(tmp_path: Path) -> None:
    golden = ROOT / "tests" / "data" / "golden" / "v1" / "bench" / "summary.json"
    doc = json.loads(golden.read_text())
    doc["cases"][0]["speed"]["steady_decode_tps"] = "fast"
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"summary\.json: cases\.0\.speed\.steady_decode_tps"):
        read_document(path, BenchSummary)


@pytest.mark.parametrize(("where", "value"), [
    ("cases.0.input_len", "32"), ("cases.0.input_len", True), ("cases.0.prompt_ids", None),
    ("probes.0.passed", "yes")])
def test_what_a_baseline_check_relies_on_is_checked_strictly(
        tmp_path: Path, where: str, value: object) -> None:
    """A baseline's lengths, prompt and probe outcomes keep the types the check relies
    on (a string or a boolean for a length is refused, not coerced)."""
    made = record_baseline(_config(probes=True), tmp_path / "bl")
    doc = made.to_dict()
    part, index, key = where.split(".")
    doc[part][int(index)][key] = value
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=re.escape(f"damaged.json: {where}: ")):
        read_record(path, "baseline", model=BaselineRecord)
