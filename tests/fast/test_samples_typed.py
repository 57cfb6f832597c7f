"""Samples are written from the typed model (``runner.samples.Sample``): each
``samples.jsonl`` line is the model's ``model_dump(mode="json")``, with every field in
the order the line has it, and the in-process callbacks get the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.progress import sample_tokens
from abgate.records.samples import WARMUP_PREFIX, Sample
from abgate.runner.execute import execute
from abgate.runner.samples import load_samples
from abgate.runner.spec import RunConfig, prepare
from tests.support.fake import experiment, fake_run

GOLDEN = Path(__file__).parent.parent / "data" / "golden" / "v1"
GOLDEN_SAMPLES = ["run/samples.jsonl", "ab/arms/a/samples.jsonl", "ab/arms/b/samples.jsonl"]


def _round_trips(path: Path) -> list[dict[str, object]]:
    """Every line of ``path``, read as a Sample and dumped again, is the same text."""
    raw = path.read_text().splitlines()
    for line in raw:
        again = Sample.model_validate(json.loads(line)).model_dump(mode="json")
        assert json.dumps(again, ensure_ascii=False) == line
    return [json.loads(x) for x in raw]


def test_a_run_writes_every_sample_field_in_the_models_order(tmp_path: Path) -> None:
    assert fake_run(tmp_path / "r", "--engine-arg", "error_rate=0.5", limit=4).returncode == 0
    lines = _round_trips(tmp_path / "r" / "samples.jsonl")
    assert len(lines) == 8
    assert {line["finish_reason"] for line in lines} == {"stop", "error"}
    written = [f for f in Sample.model_fields if f != "random_weights"]  # (read only)
    for line in lines:  # every field is written, errors and unscored ones as null
        assert list(line) == written
        assert list(line["health"]) == list(Sample.model_fields["health"].annotation
                                            .model_fields)  # type: ignore[union-attr]


@pytest.mark.parametrize("name", GOLDEN_SAMPLES)
def test_golden_samples_round_trip_key_for_key(name: str) -> None:
    assert _round_trips(GOLDEN / name)


def test_ab_arms_write_typed_samples_and_warmups(tmp_path: Path) -> None:
    from tests.support.fake import cli

    spec = experiment(tmp_path / "ab.toml", "perturb = 0.05", limit=4, agreement=False)
    assert cli("ab", str(spec), "-o", str(tmp_path / "ab")).returncode in (0, 1, 3)
    for arm in ("a", "b"):
        lines = _round_trips(tmp_path / "ab" / "arms" / arm / "samples.jsonl")
        warm = [x for x in lines if x["warmup"]]
        assert len(warm) == 1 and str(warm[0]["key"]).startswith(WARMUP_PREFIX)
        assert len(lines) == 5


def test_on_sample_gets_the_model_that_was_written(tmp_path: Path) -> None:
    p = prepare(RunConfig(engine="fake", suite="synthetic", limit=3, max_tokens=24))
    got: list[Sample] = []
    outcome = execute(p, tmp_path / "r", on_sample=got.append)
    assert outcome.status == "complete"
    assert all(isinstance(s, Sample) for s in got) and len(got) == 3
    written = load_samples(tmp_path / "r" / "samples.jsonl")
    assert [s.to_dict() for s in got] == [s.to_dict() for s in written]
    # progress counts the model given as it counts the line read back
    assert [sample_tokens(s) for s in got] == [sample_tokens(s) for s in written]
    assert all(sample_tokens(s) == s.output.tokens > 0 for s in got)
