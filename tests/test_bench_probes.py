"""Health probes (on the fake engine) and the bandwidth roofline."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from abgate.bench.probes import (
    ProbeLine,
    arithmetic_probe,
    copy_probe,
    default_probes,
    evaluate,
    needle_probe,
    run_probes,
)
from abgate.bench.roofline import (
    ModelBytes,
    gguf_model_bytes,
    measure_peak_bandwidth,
    model_bytes_for,
    roofline,
)
from abgate.engines.base import FinishReason, GenerationResult
from abgate.engines.fake import FakeEngine
from abgate.errors import AbgateError, UsageError
from abgate.gguf_file import read_gguf
from abgate.records.sections import CapabilitiesRecord, EngineRecord


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    """The fake engine (its tokens are bytes): the probes' planting, running and rules
    are abgate's; real engines run them in every baseline record (tests/test_baseline.py)."""
    e = FakeEngine.load("fake", {"n_ctx": 512})
    yield e
    e.close()


def _res(text: str, finish: FinishReason = "stop", n: int = 5) -> GenerationResult:
    return GenerationResult(request_id="p", text=text, finish_reason=finish, prompt_tokens=20,
                            output_tokens=n, output_token_ids=None, t_submit=0.0,
                            t_first_token=None, t_last_token=None)


def test_probe_checks() -> None:
    a = arithmetic_probe(0)
    total = int(a.params["a"]) + int(a.params["b"])
    assert a.expected == str(total) and str(a.params["a"]) in a.messages[0]["content"]
    assert evaluate(a, _res(f"{a.params['a']} + {a.params['b']} = {total}")).passed
    wrong = evaluate(a, _res(f"The answer is {total + 1}."))
    assert not wrong.passed and wrong.natural_eos and wrong.reason == "wrong answer"
    cut = evaluate(a, _res(str(total), "length", 32))
    assert not cut.passed and cut.correct and "no natural EOS" in cut.reason
    c = copy_probe(3)
    assert c == copy_probe(3) and c.expected in c.messages[0]["content"]
    assert evaluate(c, _res(f"Here it is: {c.expected}")).passed
    assert not evaluate(c, _res(c.expected.lower())).passed
    err = evaluate(c, dataclasses.replace(_res(""), finish_reason="error", error="boom"))
    assert not err.passed and err.reason == "engine error: boom"


def test_needle_is_planted_at_depth(engine: FakeEngine) -> None:
    for depth in (0.0, 0.5, 1.0):
        p = needle_probe(engine.tokenize, 300, depth)
        body = p.messages[0]["content"].split("\n\nWhat is the secret key")[0]
        at = body.index(f"The secret key is {p.expected}.") / len(body)
        assert abs(at - depth) < 0.15
        assert abs(len(engine.tokenize(p.messages[0]["content"])) - 300) < 20
    with pytest.raises(UsageError):
        needle_probe(engine.tokenize, 300, 1.5)


def test_probes_run_and_report(engine: FakeEngine) -> None:
    lines: list[ProbeLine] = []
    probes = default_probes(engine.tokenize, needle_len=200)
    results = run_probes(engine, probes, 512, on_sample=lines.append)
    assert [r.name for r in results] == ["arithmetic", "copy", "needle"]
    for r in results:  # which probes pass is this CPU's greedy output; the rule is not
        assert r.passed == (r.natural_eos and r.correct)
        assert r.output_tokens > 0 and r.prompt_tokens > 0 and r.reason
    assert [line.kind for line in lines] == ["probe"] * 3
    wrong = dataclasses.replace(probes[0], expected="-12345")
    bad = run_probes(engine, [wrong], 512)[0]
    assert not bad.passed and "wrong answer" in bad.reason
    with pytest.raises(UsageError, match="n_ctx=128"):
        run_probes(engine, [needle_probe(engine.tokenize, 200)], 128)


def test_gguf_header_gives_the_roofline_its_figures(model_path: str, tmp_path: Path) -> None:
    header = read_gguf(model_path)
    tensor_bytes = {t.name: t.n_bytes for t in header.tensors}
    assert len(tensor_bytes) == 272 and header.metadata["llama.block_count"] == 30
    assert tensor_bytes["token_embd.weight"] == 49152 * 576 * 34 // 32  # Q8_0
    assert "tokenizer.ggml.tokens" in header.metadata  # stepped over, not decoded
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(Path(model_path).read_bytes()[:5000])
    with pytest.raises(AbgateError, match="truncated"):
        read_gguf(cut)
    other = tmp_path / "x.bin"
    other.write_bytes(b"NOPE" + bytes(100))
    with pytest.raises(AbgateError, match="not a GGUF"):
        read_gguf(other)
    assert model_bytes_for(_described(str(other))).source.startswith("file size")


def _described(model: str) -> EngineRecord:
    """``describe()`` of an engine that loaded ``model`` and declares no figures."""
    return EngineRecord(name="x", model=model, effective_config={},
                        capabilities=CapabilitiesRecord())


def test_model_bytes_from_gguf(model_path: str) -> None:
    mb = gguf_model_bytes(model_path)
    assert mb.source == "gguf tensors" and mb.tied_embedding is True  # SmolLM2 ties them
    assert mb.weights_bytes is not None and mb.embedding_bytes is not None
    assert 0.5e8 < mb.weights_bytes < 1.0e8
    # 30 layers x 3 KV heads x 64 dims x (K + V) x 2 bytes (f16)
    assert mb.kv_bytes_per_position == 30 * 3 * 64 * 2 * 2
    assert gguf_model_bytes(model_path, "q8_0", "q8_0").kv_bytes_per_position == pytest.approx(
        30 * 3 * 64 * 2 * 34 / 32)
    declared = model_bytes_for(_described(model_path), 123)
    assert declared.weights_bytes == 123 and declared.source == "declared"
    assert model_bytes_for(_described("not-a-file")).weights_bytes is None


def test_roofline_math() -> None:
    mb = ModelBytes(100_000_000, "declared", kv_bytes_per_position=1000.0)
    r = roofline(mb, 50.0, 2000.0, 10.0)
    assert r.kv_bytes_per_token == 2_000_000
    assert r.achieved_gbps_weights == pytest.approx(5.0)
    assert r.achieved_gbps == pytest.approx(5.1)
    assert r.fraction_of_peak == pytest.approx(0.51)
    assert roofline(ModelBytes(None, "unknown"), 50.0, 10.0, 10.0).achieved_gbps is None


def test_bandwidth_probe_is_quick_and_positive() -> None:
    bw = measure_peak_bandwidth(size_mib=16, repeats=1)
    assert bw.gbps and bw.gbps > 0 and bw.source == "probe estimate" and (bw.threads or 0) >= 1


def test_probe_line_and_probes_json_entries_are_typed() -> None:
    """A probe's samples.jsonl line is a ProbeLine (the keys in the order written
    before it was typed), and probes.json entries read through ProbeEntry."""
    from abgate.bench.probes import ProbeResult
    from abgate.compare.probes import probe_entries

    pr = ProbeResult(name="copy", passed=True, natural_eos=True, correct=True, reason="ok",
                     finish_reason="stop", prompt_tokens=9, output_tokens=3, expected="x",
                     output_text="x", params={})
    line = ProbeLine(key="probe:copy", finished_at=1.0, **pr.to_dict(),
                     output_token_ids=[1, 2, 3]).model_dump(mode="json")
    assert list(line) == ["kind", "key", "warmup", "finished_at", *pr.to_dict(),
                          "output_token_ids", "error"]
    assert (line["kind"], line["warmup"], line["error"]) == ("probe", False, None)
    entries = probe_entries({"probes": [pr.to_dict()]})
    assert not isinstance(entries, str) and entries[0].name == "copy" and entries[0].passed
    assert probe_entries({"probes": [{**pr.to_dict(), "passed": "yes"}]}) == (
        "a probe entry lacks a string 'name' or a boolean 'passed'")
