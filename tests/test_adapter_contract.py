"""The adapter contract (``engines/base.py``): every adapter passes the same checks, the
fake included, so the fake that the fast tier's workflow tests run on keeps the contract
that the real engines keep.

Adapters: the fake (fast tier), an out-of-tree plug-in registered by entry point
(tests/support/plugin.py: a real dist-info on sys.path, fast tier), llama.cpp in-process,
the openai adapter against a
launched ``llama_cpp.server`` and against llama.cpp's ``llama-server`` (skipped where it
is not built: tests/tools/build_llama_server.sh), transformers on CPU on a tiny model
built here (skipped without torch). Each is loaded the way abgate loads it
(``prepare_engine`` + ``loaded``) once, under an arm's env, and checked in one test:
description, processes, env, the protocol, close (one load per adapter: a launched
server starts once). Greedy tokens are this host's (SIMD paths,
thread count), so the checks are relations and determinism within one process, never
token constants."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from abgate.engines import registry
from abgate.engines.base import (
    Engine,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from abgate.errors import AbgateError
from abgate.records.sections import EngineRecord
from abgate.runner.session import EngineSpec, loaded, prepare_engine
from tests.conftest import engine_threads, llama_server_binary, requested_threads
from tests.support.plugin import make_dist

MSGS = ({"role": "user", "content": "What is 7 + 5? Answer with a number."},)
ENV_KEY = "ABGATE_CONTRACT_ENV"
PY_LAUNCH = (f"{sys.executable} -m llama_cpp.server --model {{model}} --host {{host}} "
             "--port {port} --chat_format chat_template.default --logits_all false "
             "--use_mlock false --verbose false --interrupt_requests false")


@dataclass(frozen=True)
class Case:
    name: str
    spec: Callable[[Path, str], EngineSpec]  # (a scratch directory, the GGUF) -> spec
    in_process: bool


def _server_threads() -> dict[str, object]:
    n = requested_threads(1)
    return {"n_threads": n, "n_threads_batch": n}


def _llama_server(tmp: Path, model: str) -> EngineSpec:
    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama.cpp's llama-server is not built (tests/tools/build_llama_server.sh)")
    n = requested_threads(1)
    launch = f"{binary} -m {{model}} --host {{host}} --port {{port}}"
    return EngineSpec("openai", model, {"ctx-size": 2048, "threads": n, "threads-batch": n,
                                        "parallel": 1, "no-webui": True},
                      {"launch": launch})


def _transformers(tmp: Path, model: str) -> EngineSpec:
    pytest.importorskip("torch", reason="the transformers extra is not installed")
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    from tests.test_engine_transformers import build_tiny_model

    root = tmp / "tiny"
    if not (root / "config.json").exists():
        build_tiny_model(root)
    return EngineSpec("transformers", str(root), {"device": "cpu"})


def _plugin(tmp: Path, model: str) -> EngineSpec:
    """The out-of-tree engine ``myengine``: found through its distribution's entry
    point only (abgate names it nowhere); ``_plugin_site`` takes it off again."""
    site = tmp / "plugin-site"
    if not site.exists():
        make_dist(site, "myengine", {"myengine": "myengine_pkg:MyEngine"})
    if str(site) not in sys.path:
        sys.path.append(str(site))
    return EngineSpec("myengine")


@pytest.fixture(scope="module", autouse=True)
def _plugin_site(scratch: Path) -> Iterator[None]:
    yield
    if str(scratch / "plugin-site") in sys.path:
        sys.path.remove(str(scratch / "plugin-site"))
    registry._CLASSES.pop("myengine", None)
    sys.modules.pop("myengine_pkg", None)


CASES = [
    pytest.param(Case("fake", lambda tmp, model: EngineSpec("fake"), True), id="fake"),
    pytest.param(Case("myengine", _plugin, True), id="plugin"),
    pytest.param(Case("llamacpp", lambda tmp, model: EngineSpec(
        "llamacpp", model, {"n_ctx": 1024, **engine_threads()}), True),
        id="llamacpp", marks=pytest.mark.engine),
    pytest.param(Case("openai", lambda tmp, model: EngineSpec(
        "openai", model, {"n_ctx": 2048, **_server_threads()}, {"launch": PY_LAUNCH}), False),
        id="llama_cpp.server", marks=[pytest.mark.engine, pytest.mark.server]),
    pytest.param(Case("openai", _llama_server, False), id="llama-server",
                 marks=[pytest.mark.engine, pytest.mark.server]),
    pytest.param(Case("transformers", _transformers, True), id="transformers",
                 marks=pytest.mark.engine),
]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(scope="module")
def model(request: pytest.FixtureRequest) -> str:
    from abgate.engines.shared.default_model import default_model_path

    return str(default_model_path())


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> Case:
    value: Case = request.param
    return value


def ask(max_tokens: int = 16, rid: str = "r", **kw: object) -> GenerationRequest:
    return GenerationRequest(id=rid, params=SamplingParams(max_tokens=max_tokens, **kw),  # type: ignore[arg-type]
                             messages=MSGS)


def _ids(engine: Engine, r: GenerationResult) -> list[int]:
    """The output's token IDs: as returned, or (a server that streams text only) the
    text tokenized by the engine's own tokenizer."""
    return list(r.output_token_ids) if r.output_token_ids is not None else \
        engine.tokenize(r.text)


def _tokens_round_trip_and_the_chat_template(e: Engine, in_process: bool) -> None:
    text = "Hello world, what is 7 + 5?"
    ids = e.tokenize(text)
    assert ids and all(isinstance(i, int) for i in ids)
    back = e.detokenize(ids)
    assert back is None or back == text  # None: the engine cannot say (the default)
    prompt = e.render_prompt(MSGS)
    assert len(prompt) > len(e.tokenize(MSGS[0]["content"]))  # the template's tokens too
    shown = e.detokenize(prompt)
    assert shown is None or MSGS[0]["content"] in shown
    # the exact prompt the engine feeds: a generation's prompt is render_prompt's
    r = e.generate([ask(max_tokens=2)])[0]
    assert r.error is None, r.error
    assert r.prompt_tokens == len(prompt)
    assert r.prompt_token_ids is None or list(r.prompt_token_ids) == prompt
    by_ids = GenerationRequest(id="i", params=SamplingParams(max_tokens=2),
                               prompt_token_ids=tuple(prompt))
    if e.text_stable is None or e.text_stable(prompt):
        assert e.generate([by_ids])[0].prompt_tokens == len(prompt)


def _greedy_generation_is_deterministic_timed_and_bounded(e: Engine, in_process: bool) -> None:
    seen: list[str] = []
    a, b = e.generate([ask(rid="a"), ask(rid="b")], on_result=lambda r: seen.append(r.request_id))
    assert [a.request_id, b.request_id] == ["a", "b"] and sorted(seen) == ["a", "b"]
    assert a.error is None and a.finish_reason in ("stop", "length") and a.output_tokens > 0
    assert _ids(e, a) == _ids(e, b) and a.text == b.text
    if e.describe().capabilities.token_ids:
        assert a.output_tokens == len(a.output_token_ids or [])
    assert a.finish_reason == ("length" if a.output_tokens == 16 else "stop"), a
    if len(a.text.strip()) >= 3:  # a stop string cuts the same greedy text before it
        cut = a.text.strip()[2]
        (s,) = e.generate([ask(stop=(cut,))])
        assert s.finish_reason == "stop" and cut not in s.text and a.text.startswith(s.text)
    x, y, z = e.generate([ask(temperature=1.0, seed=11, rid="x"),
                          ask(temperature=1.0, seed=11, rid="y"),
                          ask(temperature=1.0, seed=12, ignore_eos=True, rid="z")])
    assert _ids(e, x) == _ids(e, y) and z.error is None  # seeded sampling repeats
    (full,) = e.generate([ask(max_tokens=8, ignore_eos=True)])
    assert full.finish_reason == "length" and full.output_tokens == 8, full
    assert full.t_first_token is not None and full.t_last_token is not None
    assert full.t_submit <= full.t_first_token <= full.t_last_token
    if full.token_times is not None:
        assert full.token_times == sorted(full.token_times) and len(full.token_times) == 8
    (over,) = e.generate([ask(max_tokens=100_000)])  # past every context here: never a raise
    if in_process:  # abgate's own check: an error sample
        assert over.finish_reason == "error" and over.error
    else:  # the server's call: an error sample, or an output its context bounds
        assert over.finish_reason == "error" or over.output_tokens < 4096, over


def _scores_and_top_k_follow_the_capability(e: Engine, in_process: bool) -> None:
    scoring = e.describe().capabilities.scoring
    (r,) = e.generate([ask(max_tokens=8, ignore_eos=True)])
    prompt, out = e.render_prompt(MSGS), _ids(e, r)
    if scoring is None:
        with pytest.raises(AbgateError):
            e.score(prompt, out)
    else:
        s = e.score(prompt, out, top_k=5)
        assert s.method == scoring and s.tokens == tuple(out)
        assert s.top_ids.shape == s.top_logprobs.shape == (len(out), 5)
        finite = [float(lp) for lp in s.token_logprobs if not math.isnan(lp)]
        assert finite and all(lp <= 1e-4 for lp in finite)
        if scoring == "full":
            assert s.logprobs is not None and s.logprobs.shape[0] == len(out)
        # greedy output is the scored argmax (a near-tie may flip on a batch shape)
        agree = sum(int(s.top_ids[j, 0]) == t for j, t in enumerate(out)) / len(out)
        assert agree >= 0.75, (agree, out, s.top_ids[:, 0].tolist())
    trace = e.topk_trace(prompt, out, 3)
    if trace is not None:
        assert len(trace) == len(out) and all(len(row) == 3 for row in trace)
        assert sum(row[0] == t for row, t in zip(trace, out, strict=True)) >= 0.75 * len(out)


def test_adapter_contract(case: Case, scratch: Path, model: str) -> None:
    """One load per adapter, as abgate loads it (under an arm's env): its description and
    processes, the env restored around the load and applied by ``session.env()``, the
    protocol inside it (tokens and the chat template; greedy generation: deterministic,
    timed, bounded, stop strings, seeded sampling; scores and top-k as the capability
    says), then ``close()`` and its evidence."""
    prepared = prepare_engine(case.spec(scratch, model))
    prepared = prepare_engine(EngineSpec(prepared.spec.engine, prepared.spec.model,
                                         prepared.spec.args, prepared.spec.options,
                                         {ENV_KEY: "on"}))
    assert prepared.engine_cls.in_process is case.in_process
    run_dir = scratch / f"life-{case.name}-{len(list(scratch.iterdir()))}"
    run_dir.mkdir()
    assert ENV_KEY not in os.environ
    with loaded(prepared, run_dir) as s:
        assert ENV_KEY not in os.environ  # the load's env is restored right after it
        info = s.engine.describe()
        assert isinstance(info, EngineInfo) and info.name == case.name and info.version
        assert set(info.to_dict()) == {"name", "version", "model", "effective_config",
                                       "capabilities"}
        assert EngineRecord.model_validate(info.to_dict()).name == case.name
        pids = s.engine.processes()
        if case.in_process:
            assert pids[0] == os.getpid()
        else:
            assert pids and os.getpid() not in pids
            server = psutil.Process(pids[0])
            assert server.environ().get(ENV_KEY) == "on"  # started under the arm's env
        with s.env():
            assert os.environ[ENV_KEY] == "on"
            assert all(os.environ.get(k) == v for k, v in s.engine.process_env.items())
            assert s.engine.generate([ask(max_tokens=2)])[0].error is None
            _tokens_round_trip_and_the_chat_template(s.engine, case.in_process)
            _greedy_generation_is_deterministic_timed_and_bounded(s.engine, case.in_process)
            _scores_and_top_k_follow_the_capability(s.engine, case.in_process)
        assert ENV_KEY not in os.environ
        engine = s.engine
    evidence = engine.cleanup_evidence
    if not case.in_process:  # it started processes: verified gone
        assert evidence is not None and evidence["verified"] is True, evidence
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                       for p in pids)
    elif evidence is not None:
        assert evidence["verified"] is True
    engine.close()  # idempotent
