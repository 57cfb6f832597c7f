"""Every request of a baseline case against its reference, and the seal of
``baseline.json`` (pure: no engine). The engine-level tests are in test_baseline.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abgate.baseline.agreement import agreement, first_divergence
from abgate.baseline.core import read_baseline
from abgate.bench.run import BenchCase, bench_sample
from abgate.bench.samples import BenchSample
from abgate.engines.base import GenerationResult
from abgate.errors import UsageError
from abgate.integrity import changed_parts, record_text, seal, verify_seal
from tests.test_fuzz_loaders import BASELINE


def sample(index: int, warmup: bool, ids: list[int] | None, text: str = "") -> BenchSample:
    """A bench line as the bench builds it, for a request that output ``ids``/``text``."""
    n = len(ids) if ids is not None else len(text)
    result = GenerationResult(request_id="r", text=text, finish_reason="length",
                              prompt_tokens=4, output_tokens=n, output_token_ids=ids,
                              t_submit=0.0, t_first_token=0.1, t_last_token=0.2)
    return bench_sample(BenchCase(4, n), index, warmup, result)


def test_a_warmup_that_diverges_is_caught_and_named() -> None:
    ref = [5, 6, 7, 8]
    found = agreement(ref, None, [sample(0, True, [5, 6, 9, 8]), sample(1, False, ref),
                                  sample(2, False, ref), sample(3, False, ref)])
    assert not found.all_match
    assert (found.measured_match, found.measured) == (3, 3)
    assert (found.warmup_match, found.warmup) == (0, 1)
    assert found.summary == "3/3 repeats match, the warm-up differs"
    assert found.first_divergence is not None
    assert found.first_divergence.to_dict() == {
        "request": "warm-up 1", "position": 2, "unit": "token", "reference_token": 7,
        "current_token": 9}


def test_every_repeat_is_compared_not_only_the_first() -> None:
    ref = [1, 2, 3]
    found = agreement(ref, None, [sample(0, False, ref), sample(1, False, ref),
                                  sample(2, False, [1, 2])])
    assert found.summary == "2/3 repeats match (no warm-up)"
    assert found.first_divergence is not None
    assert found.first_divergence.request == "repeat 3"
    assert found.first_divergence.position == 2  # shorter: at its length
    ok = agreement(ref, None, [sample(0, True, ref), sample(1, False, ref)])
    assert ok.all_match and ok.summary == "1/1 repeat and the warm-up match"


def test_text_is_compared_where_an_engine_gives_no_token_ids() -> None:
    found = agreement(None, "abcd", [sample(0, False, None, "abcd"),
                                     sample(1, False, None, "abXd")])
    assert found.first_divergence is not None
    assert found.first_divergence.to_dict() == {
        "request": "repeat 2", "position": 2, "unit": "character", "reference_token": None,
        "current_token": None}
    assert first_divergence([1, 2], [1, 2]) is None


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "baseline.json"
    path.write_text(record_text(doc))  # as abgate writes it
    return path


def test_seal_names_the_most_specific_changed_parts(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(BASELINE))
    verify_seal(tmp_path / "x", doc)  # as sealed: accepted
    doc["config"]["engine_args"] = {"rope_freq_base": 1.0}
    doc["cases"][0]["output_token_ids"][3] = 99
    doc["extra"] = 1
    parts = doc["integrity"]["parts"]
    body = {k: v for k, v in doc.items() if k != "integrity"}
    assert changed_parts(parts, body) == ["cases[0]", "config.engine_args", "extra"]
    with pytest.raises(UsageError, match=r"config\.engine_args") as exc:
        read_baseline(write(tmp_path, doc))
    assert str(tmp_path / "baseline.json") in str(exc.value)


def test_a_failed_or_unsealed_baseline_is_refused(tmp_path: Path) -> None:
    failed = seal({**BASELINE, "status": "failed", "error": "case 32/8: 1/2 repeats match"})
    with pytest.raises(UsageError, match="status 'failed'.*1/2 repeats match"):
        read_baseline(write(tmp_path, failed))
    bare = {k: v for k, v in BASELINE.items() if k != "integrity"}
    with pytest.raises(UsageError, match="no 'integrity' digest"):
        read_baseline(write(tmp_path, bare))
    nan = json.loads(json.dumps(BASELINE))
    nan["cases"][0]["speed"]["steady_decode_tps"]["median"] = float("nan")
    with pytest.raises(UsageError, match="not JSON"):
        read_baseline(write(tmp_path, nan))
