"""A bench's ``samples.jsonl`` lines are typed (``bench.samples.BenchSample``, and
``bench.probes.ProbeLine`` for probes): the bench's ``on_sample`` gets the model, each
line is its ``model_dump(mode="json")`` and reads back into an equal model, a concurrent
batch's lines carry their batch, and a damaged line is a one-line error."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from abgate.bench import BenchCase, BenchConfig, execute_bench, prepare_bench
from abgate.bench.probes import ProbeLine
from abgate.bench.run import execute_plan, plan_bench
from abgate.bench.samples import BenchSample, read_bench_lines
from abgate.engines.fake import FakeEngine
from abgate.engines.registry import engine_class
from abgate.errors import UsageError
from abgate.progress import Reporter, sample_tokens
from abgate.runner import records as rec

GOLDEN = Path(__file__).parent.parent / "data" / "golden"


class Seen(Reporter):
    """A progress reporter that keeps every value ``on_sample`` is called with."""

    def __init__(self) -> None:
        super().__init__("bench", None, io.StringIO())
        self.seen: list[Any] = []

    def on_sample(self, sample: Any) -> None:
        self.seen.append(sample)
        super().on_sample(sample)


def _fake(**args: object) -> FakeEngine:
    adapter = engine_class("fake")
    engine = adapter.load(adapter.resolve_model(None), args)
    assert isinstance(engine, FakeEngine)
    return engine


def _dumped(model: BaseModel) -> str:
    return json.dumps(model.model_dump(mode="json"), ensure_ascii=False)


def test_a_bench_sends_the_models_it_writes(tmp_path: Path) -> None:
    config = BenchConfig(engine="fake", input_lens=(32, 48), output_len=8, warmup=1,
                         repeats=2, probes=True, probe_len=64, peak_bw_gbps=10.0)
    progress = Seen()
    outcome = execute_bench(prepare_bench(config), tmp_path / "b", progress=progress)
    assert outcome.status == "complete"
    bench = [s for s in progress.seen if isinstance(s, BenchSample)]
    probes = [s for s in progress.seen if isinstance(s, ProbeLine)]
    assert len(bench) == 2 * (1 + 2) and len(probes) == 3 == len(progress.seen) - len(bench)
    assert [s.key for s in bench[:3]] == ["32/8#0", "32/8#1", "32/8#2"]
    assert [s.warmup for s in bench] == [True, False, False] * 2
    assert all(s.output.tokens == 8 == len(s.output.token_ids or ()) for s in bench)
    path = tmp_path / "b" / rec.SAMPLES_FILE
    assert read_bench_lines(path) == progress.seen  # parsed back: equal, and in order
    raw = path.read_text().splitlines()
    assert raw == [_dumped(s) for s in progress.seen]  # each line is its model's JSON
    assert all("batch" not in json.loads(line) for line in raw[:len(bench)])
    read_back = read_bench_lines(path)[:len(bench)]
    assert [sample_tokens(s) for s in bench] == [sample_tokens(s) for s in read_back]


def test_a_concurrent_batch_keys_its_requests_and_carries_the_batch(tmp_path: Path) -> None:
    engine = _fake()
    seen: list[BenchSample] = []
    result = execute_plan(engine, plan_bench(engine, [BenchCase(16, 4)]), warmup=0,
                          repeats=2, concurrency=2, on_sample=seen.append)
    assert [s.key for s in seen] == ["16/4#0.0", "16/4#0.1", "16/4#1.0", "16/4#1.1"]
    assert [s.batch.index if s.batch else None for s in seen] == [0, 0, 1, 1]
    assert all(s.batch is not None and s.batch.size == 2 and s.batch.output_tokens == 8
               for s in seen)
    assert result.cases[0].samples == seen
    with rec.SampleWriter(tmp_path / rec.SAMPLES_FILE) as writer:
        for s in seen:
            writer.append(s)
    lines = read_bench_lines(tmp_path / rec.SAMPLES_FILE)
    assert lines == seen and list(json.loads(_dumped(seen[0])))[-1] == "batch"
    case = result.cases[0].bench_case()
    assert case.concurrency == 2 and case.throughput_tps is not None
    assert case.throughput_tps.n == 2 and case.samples == seen
    assert case.to_dict()["samples"] == [s.to_dict() for s in seen]


def test_the_line_is_frozen_and_names_every_key() -> None:
    engine = _fake()
    result = execute_plan(engine, plan_bench(engine, [BenchCase(16, 4)]), warmup=0,
                          repeats=1)
    line = result.cases[0].samples[0]
    with pytest.raises(ValidationError):
        line.warmup = True  # type: ignore[misc]
    with pytest.raises(ValidationError, match="surprise"):
        BenchSample.model_validate({**line.to_dict(), "surprise": 1})
    assert list(line.to_dict()) == [n for n in BenchSample.model_fields if n != "batch"]


@pytest.mark.parametrize("golden", sorted(p for p in GOLDEN.iterdir() if p.is_dir()),
                         ids=lambda p: p.name)
def test_golden_bench_lines_read_back_as_written(golden: Path) -> None:
    path = golden / "bench" / rec.SAMPLES_FILE
    lines = read_bench_lines(path)
    assert lines and all(isinstance(s, BenchSample) for s in lines)
    assert [_dumped(s) for s in lines] == path.read_text().splitlines()


def test_a_damaged_line_is_one_error_naming_it(tmp_path: Path) -> None:
    good = (GOLDEN / "v1" / "bench" / rec.SAMPLES_FILE).read_text().splitlines()
    line = json.loads(good[1])
    line["output"]["tokens"] = "eight"
    path = tmp_path / rec.SAMPLES_FILE
    path.write_text("\n".join([good[0], json.dumps(line), good[2]]) + "\n")
    with pytest.raises(UsageError) as err:
        read_bench_lines(path)
    assert str(err.value).startswith(f"{path}:2: bench.output.tokens: ")
    assert "\n" not in str(err.value)
    path.write_text(json.dumps({**json.loads(good[0]), "kind": "other"}) + "\n")
    with pytest.raises(UsageError, match=rf"{path}:1: kind: .*'bench', 'probe'"):
        read_bench_lines(path)
