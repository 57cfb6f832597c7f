"""The results ledger without an engine: paths, imports of the real lm-eval sample files
in tests/data/lmeval (made by benchmarks/lmeval_samples.sh), vLLM bench results, adding,
moving and checking records, the history step rule and its HTML, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from abgate.errors import AbgateError, UsageError
from abgate.ledger.compare import SEQUENTIAL_WARNING, compare, resolve
from abgate.ledger.entries import Entry, Unit, metric
from abgate.ledger.history import history
from abgate.ledger.history_report import render
from abgate.ledger.imports import lmeval, vllm_bench
from abgate.ledger.index import add, check, read_entry
from abgate.ledger.paths import ENV, default_path, ledger_path
from abgate.ledger.store import opened
from abgate.scoring.extract import extract_integer, reference_answer
from tests.conftest import REPO
from tests.support.fake import cli

LMEVAL = REPO / "tests" / "data" / "lmeval"


def samples_file(run: str) -> Path:
    (found,) = sorted((LMEVAL / run).glob("samples_*.jsonl"))
    return found


def results_file(run: str) -> dict[str, object]:
    (found,) = sorted((LMEVAL / run).glob("results_*.json"))
    return dict(json.loads(found.read_text()))


def test_ledger_path_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "env.sqlite"))
    assert ledger_path(tmp_path / "flag.sqlite") == tmp_path / "flag.sqlite"
    assert ledger_path(None) == tmp_path / "env.sqlite"
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert ledger_path(None) == default_path() == tmp_path / "xdg" / "abgate" / "ledger.sqlite"
    monkeypatch.setenv(ENV, "off")
    with pytest.raises(UsageError, match="turned off"):
        ledger_path(None)


def test_tests_never_write_the_user_ledger() -> None:
    import os

    assert "abgate-test-ledger-" in os.environ[ENV]


@pytest.mark.parametrize("run", ["a", "b"])
def test_lmeval_samples_rescored_with_lm_evals_metric_beside(run: str) -> None:
    path = samples_file(run)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    found = lmeval.samples(path)
    assert [s.key for s in found] == [f"gsm8k_local-{i}#0" for i in range(5)]
    assert len(lines) == 2 * len(found)  # strict-match and flexible-extract per document
    for sample in found:
        raw = [x for x in lines if f"gsm8k_local-{x['doc_id']}#0" == sample.key]
        text = raw[0]["resps"][0][0]
        assert sample.output.text == text
        ref = reference_answer(raw[0]["doc"]["answer"])
        assert sample.reference == ref
        assert sample.correct == (extract_integer(text).value == ref)
        kept = (sample.model_extra or {})["lm_eval"]["metrics"]
        assert set(kept) == {"strict-match", "flexible-extract"}
        for x in raw:
            assert kept[x["filter"]]["exact_match"] == x["exact_match"]
            assert kept[x["filter"]]["filtered_resp"] == x["filtered_resps"][0]
        assert all(getattr(sample.timing, f) is None for f in type(sample.timing).model_fields)
    # lm-eval's own aggregate, recomputed beside abgate's re-scored accuracy
    unit = lmeval.entry(path).units[0]
    own = results_file(run)["results"]["gsm8k_local"]  # type: ignore[index]
    for flt in ("strict-match", "flexible-extract"):
        assert unit.metrics[f"lm_eval:exact_match,{flt}"]["value"] == pytest.approx(
            own[f"exact_match,{flt}"])  # type: ignore[index]
    assert unit.metrics["accuracy"]["value"] == pytest.approx(
        sum(bool(s.correct) for s in found) / len(found))
    assert unit.model == "smollm2-135m" and unit.engine == "lm-eval:local-completions"


def test_two_lmeval_runs_get_a_paired_verdict_with_the_sequential_warning() -> None:
    result = compare(resolve(str(samples_file("a"))), resolve(str(samples_file("b")))).to_json()
    comparison = result["comparison"]
    assert comparison["n_pairs"] == 5 and comparison["n_items"] == 5
    acc = comparison["quality"]["accuracy"]
    a, b = lmeval.samples(samples_file("a")), lmeval.samples(samples_file("b"))
    assert acc["a"]["estimate"] == pytest.approx(sum(bool(s.correct) for s in a) / 5)
    assert acc["b"]["estimate"] == pytest.approx(sum(bool(s.correct) for s in b) / 5)
    assert result["decision"] == "INCONCLUSIVE"  # 5 items < min_items
    assert result["interleaved"].startswith("no")
    assert result["warning"].startswith("NOT INTERLEAVED")
    assert "3.7-5.4%" in result["warning"] and "83% (30 items) to 100%" in result["warning"]
    assert "3.7-5.4%" in SEQUENTIAL_WARNING


def test_compare_cli_on_lmeval_files(tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    r = cli("compare", str(samples_file("a")), str(samples_file("b")), "-o", str(out))
    assert r.returncode == 3, r.stderr
    assert "WARNING: NOT INTERLEAVED" in r.stderr
    doc = json.loads(out.read_text())
    assert doc["verdict"]["decision"] == "INCONCLUSIVE" and doc["comparison"]["n_pairs"] == 5


def _vllm_result(n: int = 4, detailed: bool = True) -> dict[str, object]:
    """A ``vllm bench serve --save-result --save-detailed`` document, with vLLM's field
    names (vllm/benchmarks/serve.py); values made up, since vLLM does not run here."""
    doc: dict[str, object] = {
        "date": "20261130-120000", "endpoint_type": "openai", "backend": "openai",
        "label": None, "model_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "tokenizer_id": "HuggingFaceTB/SmolLM2-135M-Instruct", "num_prompts": n,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 1, "duration": 2.0,
        "completed": n, "failed": 0, "total_input_tokens": 32 * n,
        "total_output_tokens": 8 * n, "mean_ttft_ms": 20.0}
    if detailed:
        doc.update({
            "input_lens": [32] * n, "output_lens": [8] * n,
            "ttfts": [0.02 + 0.001 * i for i in range(n)],
            "itls": [[0.01] * 7 for _ in range(n)],
            "latencies": [0.02 + 0.001 * i + 0.07 for i in range(n)],
            "generated_texts": ["x y z"] * n, "errors": [""] * (n - 1) + ["boom"]})
    return doc


def test_vllm_bench_import_per_request_speed(tmp_path: Path) -> None:
    path = tmp_path / "openai-infqps-concurrency1.json"
    path.write_text(json.dumps(_vllm_result()))
    found = vllm_bench.samples(path)
    assert [s.key for s in found] == [f"req-{i:05d}#0" for i in range(4)]
    t = found[0].timing
    assert t.ttft_s == pytest.approx(0.02)
    assert t.steady_decode_tps == pytest.approx(7 / 0.07)
    assert t.tpot_ms == pytest.approx(10.0)
    assert t.prefill_tps == pytest.approx(32 / 0.02)
    assert t.e2e_s == pytest.approx(0.09) and t.output_tps == pytest.approx(8 / 0.09)
    assert found[3].finish_reason == "error" and found[3].timing.ttft_s is None
    unit = read_entry(path).units[0]
    assert unit.metrics["steady_decode_tps"]["value"] == pytest.approx(100.0)
    assert unit.metrics["error_rate"]["value"] == pytest.approx(0.25)
    # two runs pair by request index; different prompts under one key are refused
    other = tmp_path / "b.json"
    doc = _vllm_result()
    doc["input_lens"] = [33] * 4
    other.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="different prompts"):
        compare(resolve(str(path)), resolve(str(other)))


def test_vllm_bench_without_per_request_data_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "summary-only.json"
    path.write_text(json.dumps(_vllm_result(detailed=False)))
    with pytest.raises(UsageError, match="--save-detailed"):
        read_entry(path)


def test_add_is_idempotent_and_moves_and_deletions_are_reported(tmp_path: Path) -> None:
    run_dir = tmp_path / "lm" / "a"
    shutil.copytree(LMEVAL / "a", run_dir)
    path = samples_file("a")
    copied = run_dir / path.name
    with opened(tmp_path / "ledger.sqlite") as db:
        assert add(db, copied).action == "new"
        assert add(db, copied).action == "unchanged"
        moved = tmp_path / "elsewhere"
        shutil.move(str(run_dir), moved)
        again = add(db, moved / path.name)
        assert again.action == "moved" and again.other_path == str(copied.resolve())
        assert len(db.records()) == 1
        assert db.records()[0].moved_from == str(copied.resolve())
        (moved / path.name).unlink()
        states = check(db)
        assert [c.state for c in states] == ["missing"]
        assert db.records()[0].missing_since is not None  # marked, not dropped
    r = cli("ledger", "ls", "--ledger", str(tmp_path / "ledger.sqlite"))
    assert r.returncode == 0 and "MISSING" in r.stdout
    r = cli("ledger", "check", "--ledger", str(tmp_path / "ledger.sqlite"))
    assert r.returncode == 1 and "MISSING" in r.stdout and "0 ok, 1 not" in r.stdout


def _entry(i: int, value: float, se: float | None, commit: str, status: str = "complete",
           metric_name: str = "steady_decode_tps") -> Entry:
    unit = Unit(engine="llamacpp", model="/m/model.gguf", model_sha256="ab" * 32,
                config_digest="sha256:cfg", workload_digest="sha256:wl", suite="synthetic",
                n=40, metrics={metric_name: metric(value, se, 40)})
    return Entry(id=f"{i:064x}", kind="run", path=f"/nonexistent/run{i}", status=status,
                 started_at=1_000_000.0 + i, git_commit=commit, git_dirty=False, units=[unit])


def test_history_flags_a_step_beyond_the_runs_own_spread(tmp_path: Path) -> None:
    with opened(tmp_path / "l.sqlite") as db:
        for i, (value, se) in enumerate([(100.0, 1.0), (101.0, 1.0), (80.0, 1.0),
                                         (80.5, None), (79.9, 0.5)]):
            db.put(_entry(i, value, se, f"c{i}" * 20))
        db.put(_entry(9, 10.0, 1.0, "f" * 40, status="failed"))  # left out by default
        h = history(db, "steady_decode_tps")
    (series,) = h.series
    assert [p.value for p in series.points] == [100.0, 101.0, 80.0, 80.5, 79.9]
    steps = [p.step for p in series.points]
    assert steps == [None, None, "down", None, None]
    assert series.points[2].evidence.startswith("STEP 101 -> 80 (-20.8%)")
    assert "1.96*sqrt(se1^2+se2^2) = 2.772" in series.points[2].evidence
    assert "within the runs' spread" in series.points[1].evidence
    assert "not judged" in series.points[3].evidence
    html = render(h)
    assert html.count('<svg class="plot"') == 1 and 'id="render-check"' in html
    assert "1 STEP FLAGGED" in html and ">step<" in html


def test_history_speed_band_and_quality_rule(tmp_path: Path) -> None:
    with opened(tmp_path / "l.sqlite") as db:
        db.put(_entry(0, 100.0, 0.1, "a" * 40))
        db.put(_entry(1, 101.0, 0.1, "b" * 40))  # beyond 1.96 se, but only +1%
        db.put(_entry(2, 0.50, 0.01, "c" * 40, metric_name="accuracy"))
        db.put(_entry(3, 0.45, 0.01, "d" * 40, metric_name="accuracy"))
        speed = history(db, "steady_decode_tps")
        assert speed.series[0].points[1].step is None
        assert "< 2% (not a step)" in speed.series[0].points[1].evidence
        assert history(db, "steady_decode_tps", min_change=0.005).series[0].points[1].step
        assert len(history(db, "accuracy", config="cfg", model="model.gguf").series) == 1
        assert len(history(db, "accuracy", config="sha256:cf", model="abab").series) == 1
        with pytest.raises(UsageError, match="no recorded runs match"):
            history(db, "accuracy", config="c%")
        acc = history(db, "accuracy")
        assert acc.series[0].points[1].step == "down"  # rates have no relative band
        with pytest.raises(UsageError, match="recorded: accuracy, steady_decode_tps"):
            history(db, "nope")
        with pytest.raises(UsageError, match="no recorded runs match"):
            history(db, "accuracy", engine="vllm")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = cli("ledger", "add", str(tmp_path / "empty"), "--ledger", str(tmp_path / "l.db"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "not a run, A/B, bench or baseline directory" in r.stderr
    r = cli("compare", str(tmp_path / "nope"), str(samples_file("a")))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    with pytest.raises(AbgateError, match="no record"), opened(tmp_path / "l.db") as db:
        db.find("abcdef")


def test_indexing_failure_is_a_warning_not_an_error(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    from abgate.ledger.index import index_quietly

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level("WARNING", logger="abgate.ledger"):
        assert index_quietly(samples_file("a"), blocker / "ledger.sqlite") is None
    assert "was not indexed" in caplog.text
    (tmp_path / "not-a-record").mkdir()
    assert index_quietly(tmp_path / "not-a-record", tmp_path / "ok.sqlite") is None


def test_ledger_off_skips_indexing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from abgate.ledger.index import index_quietly

    monkeypatch.setenv(ENV, "off")
    assert index_quietly(samples_file("a")) is None
    added = index_quietly(samples_file("a"), tmp_path / "explicit.sqlite")
    assert added is not None and added.action == "new"
