"""Served A/Bs end to end: matched chat prompts on servers whose streams carry no prompt
token IDs (llama-cpp-python's server: client-rendered; llama.cpp's ``llama-server``:
server-rendered), per-arm verified cleanup, and served arms against the embedded engine
on the same GGUF (the same template, the same tokens)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from abgate.ab.evidence import SCORE_K
from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.engines.llamacpp import engine as llamacpp
from abgate.engines.llamacpp.engine import default_model_path
from abgate.engines.openai import engine as openai_compat
from abgate.errors import AbgateError
from abgate.gguf_file import token_texts
from tests.conftest import (
    HANG_S,
    REPO,
    abgate,
    llama_server_args,
    llama_server_binary,
    llama_server_launch,
    read_lines,
    requested_threads,
    toml_engine_args,
)
from tests.test_openai_engine import needs_server

EXAMPLE = REPO / "examples" / "smollm2-served-kv-q8.toml"
PY_LAUNCH = (f"{sys.executable} -m llama_cpp.server --model {{model}} --host {{host}} "
             "--port {port} --chat_format chat_template.default --logits_all false "
             "--use_mlock false --verbose false")
DECISIONS = {"ACCEPT", "REJECT", "INCONCLUSIVE"}


def served_example(tmp_path: Path) -> Path:
    """The shipped example with this interpreter, the tests' thread count, no probes."""
    text = EXAMPLE.read_text()
    shared = "engine_args = { n_ctx = 2048, n_threads = 2, n_threads_batch = 2 }"
    assert text.count(shared) == 1 and text.count('launch = "python -m') == 1
    text = text.replace(shared, f"engine_args = {toml_engine_args({'n_ctx': 2048}, 1)}")
    text = text.replace('launch = "python -m', f'launch = "{sys.executable} -m')
    text = text.replace("probes = true ", "probes = false")
    copy = tmp_path / EXAMPLE.name
    copy.write_text(text)
    return copy


def check_ab(out: Path, returncode: int, arms: dict[str, str | None]) -> dict[str, Any]:
    """A verdict, verified cleanup per launched arm, prompt SHAs equal pair by pair.
    ``arms``: arm -> how its prompt SHA is obtained (None: an embedded arm)."""
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "complete"
    comp = json.loads((out / "comparison.json").read_text())
    assert comp["decision"] in DECISIONS and returncode == comp["exit_code"]
    shas: dict[str, dict[str, str]] = {}
    for arm, source in arms.items():
        samples = [s for s in read_lines(out / "arms" / arm / "samples.jsonl")
                   if not s["warmup"]]
        assert samples and all(s["finish_reason"] != "error" for s in samples), arm
        shas[arm] = {s["key"]: s["prompt"]["sha256"] for s in samples}
        assert all(shas[arm].values()), f"{arm}: a sample without a prompt SHA"
        run = json.loads((out / "arms" / arm / "run.json").read_text())
        if source is None:
            continue
        assert run["engine"]["effective"]["chat_prompts"]["prompt_sha"] == source
        cleanup = run["cleanup"]
        assert cleanup["launched"] and cleanup["verified"], arm
        assert cleanup["server"]["survivors"] == [] and cleanup["server"]["port_free"]
        pid = cleanup["server"]["pid"]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    first = next(iter(shas.values()))
    mismatches = [(arm, k) for arm, s in shas.items() for k in first if s.get(k) != first[k]]
    assert all(s.keys() == first.keys() for s in shas.values())
    assert mismatches == []
    return ab


@needs_server
@pytest.mark.server
@pytest.mark.engine
def test_served_example_ab_matched_prompts_and_cleanup(tmp_path: Path) -> None:
    out = tmp_path / "AB"
    r = abgate("ab", str(served_example(tmp_path)), "-o", str(out), "--limit", "4",
               "--max-tokens", "16", "--warmup", "1")
    assert r.returncode in (0, 2, 3), r.stderr
    ab = check_ab(out, r.returncode, {"f16": "client-rendered", "q8": "client-rendered"})
    eff = {a: json.loads((out / "arms" / a / "run.json").read_text())["engine"]["effective"]
           for a in ("f16", "q8")}
    assert eff["q8"]["launch"][-6:] == ["--flash_attn", "true", "--type_k", "8", "--type_v", "8"]
    assert "--flash_attn" not in eff["f16"]["launch"]
    assert str(default_model_path().resolve()) in eff["f16"]["launch"]  # no model: the default
    assert eff["f16"]["chat_prompts"]["sent_as"].startswith("/v1/completions, the rendered text")
    # llama-cpp-python's server cannot be made to score given token IDs: the A/B says why
    assert "cannot score" in ab["scoring"]["q8"]["reason"]
    assert "text prompts only" in ab["scoring"]["q8"]["reason"]
    assert eff["q8"]["scoring"]["method"] is None


@needs_server
@pytest.mark.server
@pytest.mark.engine
@pytest.mark.cost(15)
def test_served_arms_match_the_embedded_arm(tmp_path: Path) -> None:
    """The same GGUF, embedded and served: the same template, the same prompt tokens
    (and, on llama-cpp-python's server, the same llama.cpp: the same greedy text). With
    distribution agreement: llama-cpp-python's server cannot score (the A/B says why);
    llama-server, a top-k candidate against the embedded full-vocabulary baseline, is
    scored on the baseline's own output token IDs (was tests/test_served_scoring.py's own
    embedded-vs-llama-server A/B)."""
    arms = {"emb": None, "py": "client-rendered"}
    extra = ""
    if llama_server_binary() is not None:
        arms["cpp"] = "server"
        extra = (f'[arms.cpp]\nengine = "openai"\nengine_args = {llama_server_args()}\n'
                 f'engine_options = {{ launch = "{llama_server_launch()}" }}\n')
    exp = tmp_path / "mixed.toml"
    exp.write_text(f"""
name = "embedded-vs-served"
baseline = "emb"
[shared]
suite = "synthetic"
difficulty = "trivial"
limit = 4
max_tokens = 24
[schedule]
mode = "interleave"
warmup = 0
[evidence]
agreement = true
probes = false
[arms.emb]
engine = "llamacpp"
engine_args = {toml_engine_args({"n_ctx": 2048}, 1)}
[arms.py]
engine = "openai"
engine_args = {toml_engine_args({"n_ctx": 2048}, 1)}
engine_options = {{ launch = "{PY_LAUNCH}" }}
{extra}""")
    out = tmp_path / "AB"
    r = abgate("ab", str(exp), "-o", str(out))
    assert r.returncode in (0, 2, 3), r.stderr
    check_ab(out, r.returncode, arms)
    emb, py = (read_lines(out / "arms" / a / "samples.jsonl") for a in ("emb", "py"))
    assert [s["output"]["text"] for s in emb] == [s["output"]["text"] for s in py]
    assert [s["prompt"]["tokens"] for s in emb] == [s["prompt"]["tokens"] for s in py]
    scoring = json.loads((out / "ab.json").read_text())["scoring"]
    assert scoring["emb"]["method"] == "full"
    assert "cannot score" in scoring["py"]["reason"]
    if "cpp" in arms:
        rows = read_lines(out / "arms" / "cpp" / "agreement.jsonl")
        assert len(rows) == 4
        assert {(row["method"], row["k"], row["source"]) for row in rows} == {
            ("top_k", SCORE_K, "baseline_output")}
        assert scoring["cpp"]["method"] == "top_k"


def _no_way_to_render_then_the_server_dies(tmp_path: Path) -> None:
    """One server launched with no model given to abgate: no server rendering and no
    template on the client, so render_prompt refuses with the reasons, and chat requests
    still go to the chat API. Then the server is killed: a chat prompt rendered through
    a server that has died is the server's failure (the run fails, ``--resume`` redoes
    it), never an error sample; close() still verifies the cleanup."""
    n = requested_threads(1)
    launch = PY_LAUNCH.replace("{model}", str(default_model_path())) \
        + f" --n_threads {n} --n_threads_batch {n}"
    engine = openai_compat.load("", {}, {"launch": launch, "ready_timeout": 120.0}, tmp_path)
    try:
        with pytest.raises(AbgateError, match="cannot render chat messages to token IDs") as e:
            engine.render_prompt(({"role": "user", "content": "Hi"},))
        assert "\n" not in str(e.value) and "no chat template on the client" in str(e.value)
        assert engine.describe().effective_config["chat_prompts"]["prompt_sha"] is None
        (res,) = engine.generate([GenerationRequest(
            id="0", params=SamplingParams(max_tokens=4),
            messages=({"role": "user", "content": "Hi"},))])
        assert res.finish_reason != "error" and res.prompt_token_ids is None
        assert engine.server is not None
        os.killpg(engine.server.proc.pid, signal.SIGKILL)
        engine.server.proc.wait(timeout=HANG_S)
        with pytest.raises(openai_compat.ServerGone, match="exited with code -9"):
            engine.generate([GenerationRequest(id="1", params=SamplingParams(max_tokens=4),
                                               messages=({"role": "user", "content": "Hi"},))])
    finally:
        engine.close()
    assert engine.cleanup_evidence is not None and engine.cleanup_evidence["verified"]


def _server_that_adds_bos_gets_no_second_one(tmp_path: Path) -> None:
    """The server's tokenizer adds BOS (forced by a GGUF override; SmolLM2's BOS is
    <|im_start|>, the template's first text): the rendered text's BOS is dropped, so the
    tokens hashed and sent are the embedded engine's, not BOS twice."""
    n = requested_threads(1)
    override = {"tokenizer.ggml.add_bos_token": True}
    launch = (PY_LAUNCH + f" --n_threads {n} --n_threads_batch {n} --kv_overrides "
              "tokenizer.ggml.add_bos_token=bool:true")
    model = str(default_model_path().resolve())
    msgs = ({"role": "user", "content": "What is 7 + 5?"},)
    # --api completions: chat messages are rendered and sent there too (no refusal)
    engine = openai_compat.load(model, {}, {"launch": launch, "ready_timeout": 120.0,
                                            "api": "completions"}, tmp_path)
    try:
        assert engine.tokenize("<|im_start|>hi")[:2] == [1, 1]  # the server adds a BOS
        served = engine.render_prompt(msgs)
        (res,) = engine.generate([GenerationRequest(id="0", params=SamplingParams(max_tokens=4),
                                                    messages=msgs)])
    finally:
        engine.close()
    emb = llamacpp.load(model, {"n_ctx": 512, "n_threads": n, "kv_overrides": override})
    try:
        assert served == emb.render_prompt(msgs) and served[:2] != [1, 1]
    finally:
        emb.close()
    assert res.finish_reason != "error" and list(res.prompt_token_ids or ()) == served


@needs_server
@pytest.mark.server
@pytest.mark.engine
def test_client_rendering_on_llama_cpp_server(tmp_path: Path) -> None:
    """Two launches: one with no way to render (then killed), one whose tokenizer adds
    BOS (the rendered text's BOS dropped)."""
    (tmp_path / "norender").mkdir()
    (tmp_path / "bos").mkdir()
    _no_way_to_render_then_the_server_dies(tmp_path / "norender")
    _server_that_adds_bos_gets_no_second_one(tmp_path / "bos")


def test_gguf_token_texts() -> None:
    """The BOS/EOS text a client-side template renders comes from the GGUF's vocabulary."""
    texts = token_texts(default_model_path(), {0, 1, 2})
    assert texts == {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}
