"""Load shapes: spec parsing, the seeded schedule, and vllm-bench-serve metrics by hand."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from abgate.bench.load import (
    RequestTimes,
    arrival_schedule,
    max_in_flight,
    parse_load,
    sample_indices,
    serve_metrics,
)
from abgate.errors import UsageError


def test_parse_shapes() -> None:
    assert parse_load("closed").in_flight_cap == 1
    c = parse_load("concurrency:32")
    assert (c.shape, c.in_flight_cap) == ("concurrency", 32)
    p = parse_load("poisson:2.5", burstiness=0.5, max_concurrency=8)
    assert (p.rate, p.burstiness, p.in_flight_cap) == (2.5, 0.5, 8)


@pytest.mark.parametrize("bad", ["open", "concurrency:0", "concurrency:x", "poisson:-1",
                                 "poisson:inf", "poisson:", "closed:3"])
def test_bad_specs_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_load(bad)


def test_bad_spec_cli_exit_2_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "abgate", "bench", "--load", "poisson:0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "poisson:RATE" in r.stderr


def test_schedule_is_seeded_gamma() -> None:
    spec = parse_load("poisson:4", burstiness=2.0, num_prompts=5, seed=7)
    s = arrival_schedule(spec)
    gaps = np.random.default_rng(7).gamma(2.0, 1 / 8.0, size=4)
    assert s == [0.0, *np.cumsum(gaps).tolist()]
    assert arrival_schedule(spec) == s
    assert arrival_schedule(parse_load("concurrency:2", num_prompts=3)) == [0.0] * 3


def test_sample_indices_seeded_and_repeat() -> None:
    a = sample_indices(3, 7, 1)
    assert a == sample_indices(3, 7, 1) and sorted(a[:3]) == [0, 1, 2] and len(a) == 7


def test_metrics_by_hand() -> None:
    reqs = [RequestTimes(True, 0.0, (0.1, 0.3, 0.4), 0.5, 3),
            RequestTimes(True, 0.2, (0.5, 0.9), 1.0, 2),
            RequestTimes(False, 0.3, (), 0.3, 0)]
    m = serve_metrics(reqs, 1.25)
    assert (m["completed"], m["failed"], m["total_output_tokens"]) == (2, 1, 5)
    assert m["output_throughput"] == pytest.approx(4.0)
    assert m["ttft_ms"]["mean"] == pytest.approx(200.0)  # 100 and 300
    # TPOT: (500-100)/2 = 200 and (800-300)/1 = 500
    assert m["tpot_ms"]["median"] == pytest.approx(350.0)
    assert m["itl_ms"]["mean"] == pytest.approx((200 + 100 + 400) / 3)
    assert max_in_flight(reqs) == 2
