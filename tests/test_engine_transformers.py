"""The transformers engine, for real: a tiny random-init Llama built and saved here (no
download), and the embedded SmolLM2 GGUF dequantized by transformers (slow).

Skipped as a whole where torch or transformers are not importable
(``pip install 'abgate[transformers]'``). ``ABGATE_TEST_DEVICE=cuda`` runs the tiny-model
tests on a GPU instead of the CPU (CUDA events, the compiled static cache, NVML cleanup).
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import torch
    import transformers
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    pytest.skip(f"the transformers engine needs torch and transformers ({exc}); "
                "pip install 'abgate[transformers]'", allow_module_level=True)

from abgate.bench.fidelity import fidelity
from abgate.bench.roofline import model_bytes_for
from abgate.engines.base import Engine, GenerationRequest, SamplingParams
from abgate.engines.transformers import engine as hf
from abgate.errors import AbgateError, UsageError
from abgate.metrics import request_timing
from abgate.records.sections import EngineRecord
from tests.conftest import abgate, read_lines

pytestmark = [pytest.mark.engine, pytest.mark.extras]  # every test here loads a real engine

DEVICE = os.environ.get("ABGATE_TEST_DEVICE", "cpu")
CUDA = DEVICE.startswith("cuda")
MSGS = ({"role": "user", "content": "What is 7 + 5? Answer with a number."},)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")
CORPUS = ["the quick brown fox jumps over the lazy dog", "what is 7 + 5 ? answer 12",
          "one two three four five six seven eight nine ten", "user assistant system",
          "numbers 0 1 2 3 4 5 6 7 8 9 and words"] * 4


def build_tiny_model(root: Path, *, weights: bool = True) -> Path:
    """A 2-layer Llama with random (seeded) weights and a byte-level BPE tokenizer
    trained here on a few sentences, saved as a Hugging Face model directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<|im_start|>", eos_token="<|im_end|>",
        pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    root.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(root)
    config = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, tie_word_embeddings=False, initializer_range=0.3)
    if weights:
        torch.manual_seed(0)
        transformers.LlamaForCausalLM(config).save_pretrained(root)
    else:
        config.save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def engine(tiny: Path) -> Iterator[hf.TransformersEngine]:
    e = hf.load(str(tiny), {"device": DEVICE})
    yield e
    e.close()


def req(max_tokens: int = 24, rid: str = "r", **kw: Any) -> GenerationRequest:
    return GenerationRequest(id=rid, params=SamplingParams(max_tokens=max_tokens, **kw),
                             messages=MSGS)


def _is_an_engine_and_describes_itself(engine: hf.TransformersEngine, tiny: Path) -> None:
    assert isinstance(engine, Engine)
    info = engine.describe()
    assert info.name == "transformers" and info.version == transformers.__version__
    assert info.model == str(tiny)
    eff = info.effective_config
    n_params = sum(p.numel() for p in engine._model.parameters())
    assert eff["parameter_count"] == n_params and eff["weight_bytes"] == 4 * n_params
    assert eff["dtype"] == "float32" and eff["cache_implementation"] == "dynamic"
    assert eff["attn_implementation"] in ("sdpa", "eager")
    assert eff["device"] == DEVICE and eff["device_name"]
    assert (eff["device_capability"] is not None) == CUDA
    assert eff["torch_version"] == torch.__version__
    assert eff["transformers_version"] == transformers.__version__
    assert "cuda_version" in eff and eff["compile"] is False
    assert eff["device_map"] is None and eff["device_map_placed"] is None
    assert eff["engine_timings_clock"] == ("cuda events" if CUDA else
                                           "host perf_counter (synchronous forward)")
    assert eff["max_position_embeddings"] == eff["max_model_len"] == 256
    assert eff["tied_embedding"] is False and eff["load_format"] == "auto"
    assert eff["weights"] == "checkpoint"
    # the roofline takes the engine's in-memory figures (untied: the embedding table
    # is not read in full per token; K+V of 2 layers x 2 heads x 16 dims in fp32)
    mb = model_bytes_for(EngineRecord.model_validate(info.to_dict()))
    assert mb.source == "engine (in-memory tensors)"
    assert mb.weights_bytes == eff["weight_bytes"] - eff["embedding_bytes"]
    assert mb.kv_bytes_per_position == 2 * 2 * 2 * 16 * 4
    assert engine.processes() == [os.getpid()]
    assert info.capabilities.scoring == "full" and info.capabilities.engine_timings


def _greedy_is_deterministic_with_per_token_times(engine: hf.TransformersEngine) -> None:
    a, b = engine.generate([req(), req()])
    assert a.error is None and a.output_token_ids == b.output_token_ids and a.text == b.text
    assert a.output_tokens == len(a.output_token_ids or []) > 0
    assert a.prompt_token_ids == engine.render_prompt(MSGS) and a.prompt_tokens > 5
    assert a.token_times is not None and len(a.token_times) == a.output_tokens
    assert a.t_submit < a.token_times[0] == a.t_first_token
    assert a.token_times == sorted(a.token_times) and a.token_times[-1] == a.t_last_token
    et = a.engine_timings
    assert et["prompt_eval_tokens"] == a.prompt_tokens
    assert et["eval_tokens"] == a.output_tokens - 1
    assert et["prompt_eval_ms"] > 0 and et["eval_ms"] > 0
    fid = fidelity(a, request_timing(a))
    assert fid.counts_match is True
    # the engine's decode time is part of the wall time between tokens
    assert fid.decode_ratio is not None and 0 < fid.decode_ratio <= 1.0 + 1e-6


def _ignore_eos_max_tokens_and_stop_strings(engine: hf.TransformersEngine) -> None:
    r = engine.generate([req(max_tokens=12, ignore_eos=True)])[0]
    assert r.finish_reason == "length" and r.output_tokens == 12
    full = engine.generate([req(max_tokens=40, ignore_eos=True)])[0]
    cut = next(ch for ch in full.text[3:] if ch.strip())
    s = engine.generate([req(max_tokens=40, ignore_eos=True, stop=(cut,))])[0]
    assert s.finish_reason == "stop" and cut not in s.text and full.text.startswith(s.text)


def _eos_ends_the_output_and_is_not_kept(engine: hf.TransformersEngine) -> None:
    eos = min(engine._eos)
    watch = hf._Watch(torch, engine._on_cuda, engine._eos, engine.detokenize,
                      SamplingParams(max_tokens=10), prompt_len=2)
    assert not watch.should_stop(torch.tensor([[1, 2, 40]]))
    assert watch.should_stop(torch.tensor([[1, 2, 40, eos]]))
    assert watch.cut([40, eos, 41]) == ([40], "stop", None)
    assert watch.cut(list(range(40, 60))) == (list(range(40, 50)), "length", None)
    keep = hf._Watch(torch, engine._on_cuda, engine._eos, engine.detokenize,
                     SamplingParams(max_tokens=10, ignore_eos=True), prompt_len=2)
    assert not keep.should_stop(torch.tensor([[1, 2, eos, 41]]))
    assert keep.cut([eos, 41]) == ([eos, 41], "length", None)
    # the streamer: the prompt marks the start, then tokens arrive with their times
    keep.put(torch.tensor([[1, 2]]))
    keep.put(torch.tensor([eos]))
    keep.put(torch.tensor([[41, 42]]))  # speculative decoding: several per step
    assert keep.streamed == [eos, 41, 42] and len(keep.times) == 3
    assert keep.times[1] == keep.times[2] and len(keep.on_host) == 2


def _score_is_consistent_with_greedy_decoding(engine: hf.TransformersEngine) -> None:
    r = engine.generate([req(max_tokens=16, ignore_eos=True)])[0]
    out, prompt = r.output_token_ids or [], r.prompt_token_ids or []
    s = engine.score(prompt, out, top_k=3)
    assert s.method == "full" and s.tokens == tuple(out) and s.logprobs is not None
    assert s.logprobs.shape == (len(out), engine.describe().effective_config["n_vocab"])
    assert np.allclose(np.exp(s.logprobs).sum(axis=1), 1.0, atol=1e-4)
    assert np.allclose(s.token_logprobs, s.logprobs[np.arange(len(out)), out])
    # every greedy token is the argmax of its teacher-forced distribution
    assert s.top_ids[:, 0].tolist() == out
    assert (s.top_logprobs[:, 0] >= s.top_logprobs[:, 1]).all()
    assert engine.topk_trace(prompt, out, 3) == s.top_ids.tolist()
    with pytest.raises(ValueError, match="non-empty"):
        engine.score(prompt, [])


def _prefill_scoring_agrees_with_decode_scoring(tiny: Path,
                                                   engine: hf.TransformersEngine) -> None:
    fast = hf.load(str(tiny), {"device": DEVICE, "score_mode": "prefill"})
    try:
        assert engine.describe().effective_config["score_mode"] == "decode"
        assert fast.describe().effective_config["score_mode"] == "prefill"
        r = engine.generate([req(max_tokens=12, ignore_eos=True)])[0]
        prompt, out = r.prompt_token_ids or [], r.output_token_ids or []
        a, b = engine.score(prompt, out), fast.score(prompt, out)
        assert a.logprobs is not None and b.logprobs is not None
        assert np.abs(a.logprobs - b.logprobs).max() < 1e-3
        assert a.top_ids[:, 0].tolist() == b.top_ids[:, 0].tolist() == out
    finally:
        fast.close()


def _static_cache_matches_dynamic(tiny: Path, engine: hf.TransformersEngine) -> None:
    static = hf.load(str(tiny), {"device": DEVICE, "cache_implementation": "static",
                                 "max_cache_len": 128})
    try:
        eff = static.describe().effective_config
        assert eff["cache_implementation"] == "static" and eff["max_cache_len"] == 128
        assert eff["compile"] is CUDA  # transformers compiles only on CUDA
        a = engine.generate([req(max_tokens=16, ignore_eos=True)])[0]
        b = static.generate([req(max_tokens=16, ignore_eos=True)])[0]
        assert a.output_token_ids == b.output_token_ids
        prompt, out = a.prompt_token_ids or [], a.output_token_ids or []
        sa, sb = engine.score(prompt, out), static.score(prompt, out)
        assert sa.logprobs is not None and sb.logprobs is not None
        assert np.abs(sa.logprobs - sb.logprobs).max() < 1e-3
    finally:
        static.close()


def _prompt_lookup_speculation_is_lossless_for_greedy(
        tiny: Path, engine: hf.TransformersEngine) -> None:
    spec = hf.load(str(tiny), {"device": DEVICE, "prompt_lookup_num_tokens": 3})
    try:
        assert spec.capabilities.engine_timings is False
        a = engine.generate([req(max_tokens=16, ignore_eos=True)])[0]
        b = spec.generate([req(max_tokens=16, ignore_eos=True)])[0]
        assert b.error is None and b.output_token_ids == a.output_token_ids
        assert b.engine_timings == {} and len(b.token_times or []) == 16
    finally:
        spec.close()


def _assistant_model_speculation_is_lossless_for_greedy(
        tiny: Path, engine: hf.TransformersEngine) -> None:
    """The tiny model as its own draft: greedy speculative decoding keeps the plain
    greedy tokens; several tokens can arrive per verification step."""
    spec = hf.load(str(tiny), {"device": DEVICE, "assistant_model": str(tiny),
                               "num_assistant_tokens": 3})
    try:
        eff = spec.describe().effective_config
        assert eff["assistant_model"] == {
            "path": str(tiny.resolve()), "num_assistant_tokens": 3,
            "parameter_count": engine.describe().effective_config["parameter_count"]}
        assert spec.capabilities.engine_timings is False and eff["score_mode"] == "prefill"
        assert eff["engine_timings_clock"] is None
        a = engine.generate([req(max_tokens=16, ignore_eos=True)])[0]
        b = spec.generate([req(max_tokens=16, ignore_eos=True)])[0]
        assert b.error is None and b.output_token_ids == a.output_token_ids
        assert b.engine_timings == {} and len(b.token_times or []) == 16
        times = b.token_times or []
        assert times == sorted(times) and len(set(times)) < len(times)  # drafts accepted
        prompt, out = a.prompt_token_ids or [], a.output_token_ids or []
        assert spec.score(prompt, out).top_ids[:, 0].tolist() == out
        short = spec.generate([req(max_tokens=5, ignore_eos=True)])[0]
        assert short.output_token_ids == out[:5] and short.finish_reason == "length"
    finally:
        spec.close()
    assert spec.cleanup_evidence is not None and spec.cleanup_evidence["verified"] is True


def _device_map_places_the_model(tiny: Path, engine: hf.TransformersEngine) -> None:
    """device_map (accelerate) instead of device: "auto" on the one device there is,
    or an explicit JSON object; the same greedy tokens as the plain engine."""
    auto_ok = CUDA or not torch.cuda.is_available()  # "auto" picks CUDA where there is one
    maps: list[Any] = ["auto"] if auto_ok else []
    maps.append({"": DEVICE if not CUDA else 0})
    a = engine.generate([req(max_tokens=16, ignore_eos=True)])[0]
    for device_map in maps:
        placed = hf.load(str(tiny), {"device_map": device_map})
        try:
            eff = placed.describe().effective_config
            assert eff["device_map"] == device_map
            assert eff["device"] == str(placed._model.device)
            assert set(map(str, eff["device_map_placed"].values())) == {eff["device"]} or CUDA
            assert torch.device(eff["device"]).type == torch.device(DEVICE).type
            assert eff["engine_timings_clock"] == ("cuda events" if CUDA else
                                                   "host perf_counter (synchronous forward)")
            b = placed.generate([req(max_tokens=16, ignore_eos=True)])[0]
            assert b.error is None and b.output_token_ids == a.output_token_ids
            assert b.engine_timings["eval_tokens"] == 15
        finally:
            placed.close()
        assert placed.cleanup_evidence is not None and placed.cleanup_evidence["verified"]


def _deterministic_switch_is_scoped_and_described(
        tiny: Path, engine: hf.TransformersEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    from abgate.engines.transformers import determinism as det

    assert engine.describe().effective_config["deterministic"] is False
    if CUDA:  # this process started CUDA already (the module's engine): refused unless set
        monkeypatch.delenv(det.CUBLAS_VAR, raising=False)
        with pytest.raises(UsageError, match="CUDA has already started"):
            hf.load(str(tiny), {"device": DEVICE, "deterministic": True})
        monkeypatch.setenv(det.CUBLAS_VAR, ":4096:8")
    strict = hf.load(str(tiny), {"device": DEVICE, "deterministic": True})
    try:
        eff = strict.describe().effective_config
        assert eff["deterministic"] is True
        assert eff["cublas_workspace_config"] == (os.environ.get(det.CUBLAS_VAR) if CUDA
                                                  else None)
        seen: list[bool] = []
        orig = strict._decode

        def spy(*args: Any, **kw: Any) -> Any:
            seen.append(torch.are_deterministic_algorithms_enabled())
            return orig(*args, **kw)

        monkeypatch.setattr(strict, "_decode", spy)
        a, b = strict.generate([req(max_tokens=12, ignore_eos=True)] * 2)
        assert seen == [True, True] and not torch.are_deterministic_algorithms_enabled()
        assert a.output_token_ids == b.output_token_ids == \
            engine.generate([req(max_tokens=12, ignore_eos=True)])[0].output_token_ids
        strict.score(a.prompt_token_ids or [], a.output_token_ids or [])
        assert not torch.are_deterministic_algorithms_enabled()  # restored after scoring
    finally:
        strict.close()


def _seeded_sampling_repeats(engine: hf.TransformersEngine) -> None:
    a = engine.generate([req(temperature=1.0, seed=11, ignore_eos=True),
                         req(temperature=1.0, seed=11, ignore_eos=True),
                         req(temperature=1.0, seed=12, ignore_eos=True)])
    assert a[0].output_token_ids == a[1].output_token_ids
    assert a[0].output_token_ids != a[2].output_token_ids


def _context_overflow_and_raw_prompts(engine: hf.TransformersEngine) -> None:
    r = engine.generate([req(max_tokens=5000)])[0]
    assert r.finish_reason == "error" and r.error and "exceeds the context" in r.error
    raw = GenerationRequest(id="p", params=SamplingParams(max_tokens=4), prompt="one two")
    ids = GenerationRequest(id="i", params=SamplingParams(max_tokens=4),
                            prompt_token_ids=tuple(engine.tokenize("one two")))
    a, b = engine.generate([raw, ids])
    assert a.error is None and b.error is None and b.prompt_token_ids == engine.tokenize("one two")


def _random_weights_are_labelled_speed_only(tmp_path: Path) -> None:
    from abgate.ab.analyze import random_weights
    from abgate.records.documents import AbExperiment, AbRecord, ExperimentArm

    d = build_tiny_model(tmp_path / "config-only", weights=False)  # no weight files
    e = hf.load(str(d), {"device": DEVICE, "load_format": "dummy", "seed": 3})
    try:
        eff = e.describe().effective_config
        assert eff["load_format"] == "dummy" and eff["weights"] == hf.RANDOM_WEIGHTS_LABEL
        r = e.generate([req(max_tokens=8, ignore_eos=True)])[0]
        assert r.output_tokens == 8
        ab = AbRecord.model_construct(  # only the parts random_weights reads
            experiment=AbExperiment(baseline="b", arms={"b": ExperimentArm()}))
        # records v2: the effective facet is the arm's run.json's, passed in
        assert "speed only" in (random_weights(ab, "b", [], eff) or "")
        assert random_weights(ab, "b", []) is None  # neither the facet nor the args say so
    finally:
        e.close()
    again = hf.load(str(d), {"device": DEVICE, "load_format": "dummy", "seed": 3})
    try:  # seeded: the same random weights
        assert again.generate([req(max_tokens=8, ignore_eos=True)])[0].output_token_ids == \
            r.output_token_ids
    finally:
        again.close()


def _close_frees_the_model_and_records_evidence(tiny: Path) -> None:
    e = hf.load(str(tiny), {"device": DEVICE})
    ref = weakref.ref(e._model)
    e.close()
    ev = e.cleanup_evidence
    assert ev is not None and ev["kind"] == "in_process" and ev["pid"] == os.getpid()
    assert ev["gpu"]["checked"] is CUDA and ev["verified"] is True
    assert ref() is None
    e.close()  # idempotent
    with pytest.raises(AbgateError):
        hf.load(str(tiny / "tokenizer.json"), {})  # not a model


# -- the tests: each runs several checks on the module's one load (or its variants) -----


def test_tiny_model_protocol(engine: hf.TransformersEngine, tiny: Path) -> None:
    """The module's engine: its description and roofline figures, greedy determinism
    with per-token times, ignore_eos/max_tokens/stop strings, EOS handling, scores
    consistent with greedy decoding, seeded sampling, context overflow, raw prompts."""
    _is_an_engine_and_describes_itself(engine, tiny)
    _greedy_is_deterministic_with_per_token_times(engine)
    _ignore_eos_max_tokens_and_stop_strings(engine)
    _eos_ends_the_output_and_is_not_kept(engine)
    _score_is_consistent_with_greedy_decoding(engine)
    _seeded_sampling_repeats(engine)
    _context_overflow_and_raw_prompts(engine)


def test_variants_keep_the_plain_greedy_tokens(
        tiny: Path, engine: hf.TransformersEngine, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Each variant loaded beside the module's engine: prefill scoring, a static cache,
    prompt-lookup and assistant-model speculation, device_map, deterministic=true: each
    described as what it is, each with the plain engine's greedy tokens and scores;
    then dummy weights and close()."""
    _prefill_scoring_agrees_with_decode_scoring(tiny, engine)
    _static_cache_matches_dynamic(tiny, engine)
    _prompt_lookup_speculation_is_lossless_for_greedy(tiny, engine)
    _assistant_model_speculation_is_lossless_for_greedy(tiny, engine)
    _device_map_places_the_model(tiny, engine)
    _deterministic_switch_is_scoped_and_described(tiny, engine, monkeypatch)
    _random_weights_and_close(tmp_path, tiny)


def _random_weights_and_close(tmp_path: Path, tiny: Path) -> None:
    """Random (dummy) weights are labelled speed-only and seeded; close() frees the
    model, records its evidence and is idempotent; a file that is no model is refused."""
    _random_weights_are_labelled_speed_only(tmp_path)
    _close_frees_the_model_and_records_evidence(tiny)


# -- the A/B on the tiny model: a static cache changes the layout, not the arithmetic -------


def _cache_experiment(model: Path) -> str:
    return f"""
name = "hf-cache"
baseline = "dynamic"
[shared]
engine = "transformers"
model = "{model}"
suite = "synthetic"
difficulty = "trivial"
limit = 3
max_tokens = 24
engine_args = {{ device = "{DEVICE}" }}
[schedule]
mode = "auto"
warmup = 0
[evidence]
probes = false
[arms.dynamic]
[arms.static]
engine_args = {{ cache_implementation = "static", max_cache_len = 256 }}
"""


def test_abgate_ab_dynamic_vs_static_cache(tmp_path: Path, tiny: Path) -> None:
    (tmp_path / "exp.toml").write_text(_cache_experiment(tiny))
    out = tmp_path / "AB"
    r = abgate("ab", str(tmp_path / "exp.toml"), "-o", str(out), timeout=900)
    assert r.returncode in (0, 1, 3), r.stdout + r.stderr
    ab = json.loads((out / "ab.json").read_text())
    assert ab["schedule"]["mode"] == "interleave"  # both arms resident in one process
    for arm in ("dynamic", "static"):
        assert ab["scoring"][arm]["method"] == "full" and ab["scoring"][arm]["n_tokens"] > 0
    comp = json.loads((out / "comparison.json").read_text())["comparisons"]["static"]
    agreement = comp["comparison"]["agreement"]
    assert agreement["measured"] and agreement["method"] == "full"
    assert agreement["n_items"] == 3
    assert agreement["mean_kld"]["estimate"] < 1e-3
    assert agreement["top1_agreement"]["estimate"] == 1.0


# -- the embedded SmolLM2 GGUF, dequantized by transformers (slow: ~1 min per load, once) --


@pytest.fixture(scope="module")
def gguf_run(tmp_path_factory: pytest.TempPathFactory, model_path: str) -> Path:
    """One `abgate run` of the GGUF on transformers, read by the tests below."""
    out = tmp_path_factory.mktemp("gguf") / "R"
    r = abgate("run", "--engine", "transformers", "--model", model_path, "--suite",
               "synthetic", "--limit", "2", "--max-tokens", "24", "--engine-arg",
               f"device={DEVICE}", "-o", str(out), timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.mark.slow
@pytest.mark.cost(20)
def test_abgate_run_on_the_smollm2_gguf(gguf_run: Path, tmp_path: Path,
                                        model_path: str) -> None:
    doc = json.loads((gguf_run / "run.json").read_text())
    assert doc["status"] == "complete"
    eff = doc["engine"]["effective"]
    assert doc["engine"]["name"] == "transformers" and eff["weights"] == "dequantized from GGUF"
    assert eff["model_type"] == "llama" and eff["parameter_count"] > 100_000_000
    samples = read_lines(gguf_run / "samples.jsonl")
    measured = [s for s in samples if not s.get("warmup")]
    assert len(measured) == 2 and all(s["finish_reason"] != "error" for s in measured)
    assert all(s["output"]["tokens"] > 0 for s in measured)
    assert doc["cleanup"]["verified"] is True
    # the chat template renders the same prompt tokens llama.cpp does from the same file
    lc = tmp_path / "L"
    r = abgate("run", "--model", model_path, "--suite", "synthetic", "--limit", "2",
               "--max-tokens", "4", "-o", str(lc), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    theirs = {s["key"]: s["prompt"]["sha256"] for s in read_lines(lc / "samples.jsonl")
              if not s.get("warmup")}
    assert {s["key"]: s["prompt"]["sha256"] for s in measured} == theirs
