"""Planning a bench on the fake engine (moved from the engine tier's tests/test_bench.py):
an expected prompt SHA is checked before anything runs, one SHA per case."""

from __future__ import annotations

import pytest

from abgate.bench import BenchCase, fixed_length_prompt, plan_bench, prompt_sha256
from abgate.engines import fake
from abgate.errors import UsageError


def test_expect_prompt_sha_refuses() -> None:
    engine = fake.load("fake", {"n_ctx": 256})
    good = prompt_sha256(fixed_length_prompt(engine.tokenize, 32))
    plan = plan_bench(engine, [BenchCase(32, 4)], expect_prompt_sha=[good])
    assert plan.cases[0].prompt_sha256 == good
    with pytest.raises(UsageError, match="refusing to run"):
        plan_bench(engine, [BenchCase(32, 4)], expect_prompt_sha=["0" * 64])
    with pytest.raises(UsageError, match="2 SHA"):
        plan_bench(engine, [BenchCase(32, 4)], expect_prompt_sha=[good, good])
