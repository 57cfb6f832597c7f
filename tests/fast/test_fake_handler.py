"""The fake engine's handler hook (``tests.support.fake.use_handler``): a test states an
odd behaviour inline, as httpx's ``MockTransport(handler)``: this request errors, is
slow, returns these tokens; None keeps the model's own reply."""

from __future__ import annotations

import json
import time
from pathlib import Path

from abgate.engines import fake
from abgate.engines.base import GenerationRequest, GenerationResult, SamplingParams
from abgate.runner.documents import read_record
from tests.support.fake import cli, fake_run, use_handler

PARAMS = SamplingParams(max_tokens=24)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _generate(engine: fake.FakeEngine, n: int) -> list[GenerationResult]:
    return engine.generate([GenerationRequest(f"r{i}", PARAMS, prompt=f"has {i} apples")
                            for i in range(n)])


def test_handler_replies_fails_raises_or_keeps_the_model() -> None:
    engine = fake.load("fake", {})
    plain = _generate(engine, 4)

    def handler(call: fake.FakeCall) -> GenerationResult | None:
        if call.number == 1:
            return call.reply("forty-two")
        if call.number == 2:
            return call.failed("the handler says no")
        if call.number == 3:
            raise RuntimeError("boom")
        return None

    with use_handler(handler):
        got = fake.load("fake", {}).generate(
            [GenerationRequest(f"r{i}", PARAMS, prompt=f"has {i} apples") for i in range(4)])
    assert got[0].text == "forty-two" and got[0].output_token_ids == list(b"forty-two")
    assert got[0].finish_reason == "stop" and got[0].t_first_token is not None
    assert got[1].finish_reason == "error" and got[1].error == "the handler says no"
    assert got[2].finish_reason == "error" and got[2].error == "RuntimeError: boom"
    assert got[3].text == plain[3].text and got[3].output_token_ids == plain[3].output_token_ids
    assert fake.set_handler(None) is None  # the block restored "no handler"


def test_handler_token_ids_and_a_slow_request() -> None:
    def slow(call: fake.FakeCall) -> GenerationResult | None:
        time.sleep(0.05)
        return call.reply(token_ids=[72, 105], finish="length")

    with use_handler(slow):
        start = time.monotonic()
        (result,) = _generate(fake.load("fake", {}), 1)
    assert time.monotonic() - start >= 0.05
    assert (result.text, result.finish_reason, result.output_tokens) == ("Hi", "length", 2)


def test_a_run_records_what_the_handler_said(tmp_path: Path) -> None:
    def handler(call: fake.FakeCall) -> GenerationResult | None:
        return call.failed("injected by the test") if call.number == 2 else None

    with use_handler(handler):
        r = fake_run(tmp_path / "r", limit=3, seeds="0")
    assert r.returncode == 0, r.stderr
    samples = _lines(tmp_path / "r" / "samples.jsonl")
    errors = [s for s in samples if s["finish_reason"] == "error"]
    assert [s["error"] for s in errors] == ["injected by the test"]
    assert sum(bool(s["correct"]) for s in samples) == 2


def test_a_handler_interrupt_is_a_ctrl_c(tmp_path: Path) -> None:
    def handler(call: fake.FakeCall) -> GenerationResult | None:
        if call.number == 2:
            raise KeyboardInterrupt
        return None

    with use_handler(handler):
        r = fake_run(tmp_path / "r", limit=3, seeds="0")
    assert r.returncode == 130, r.stderr
    assert read_record(tmp_path / "r" / "run.json", "run").status == "interrupted"
    again = cli("run", "--resume", str(tmp_path / "r"))
    assert again.returncode == 0, again.stderr
    assert len(_lines(tmp_path / "r" / "samples.jsonl")) == 3
