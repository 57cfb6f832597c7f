"""Served engines through the OpenAI-compatible HTTP API (engine ``openai``).

Drives vLLM, SGLang, llama.cpp's server and llama-cpp-python's server with an async
streaming client: ``--endpoint URL`` (repeatable: data-parallel replicas, requests go
to the least busy one) or ``--launch "CMD ... --port {port}"`` (a managed server, see
:mod:`abgate.engines.shared.server`). ``--concurrency N`` bounds the requests in flight over
all endpoints. Token counts come from the server's usage report, never from
re-tokenized text; where a server sends none, the number of streamed chunks is used
and the record says so (``token_counts`` in the effective configuration,
``usage_reported`` per sample).

A failed request is an error sample (``finish_reason="error"`` with the message);
failures before any output arrived are retried (bounded, recorded). A launched server
that dies, or an endpoint that refuses connections, fails the run instead, so that
``--resume`` redoes the lost samples against a fresh server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from abgate.engines.base import (
    Capabilities,
    Engine,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    Message,
    OnResult,
    TokenScores,
)
from abgate.engines.openai import chat_render as cr
from abgate.engines.openai import scoring as sc
from abgate.engines.openai import stream as st
from abgate.engines.openai import text_prompts as tp
from abgate.engines.openai.discovery import PATHS, discover
from abgate.engines.openai.endpoints import (
    RETRY_AFTER_CAP_S,
    EndpointStats,
    ServerGone,
    retried,
    stream_result,
)
from abgate.engines.openai.endpoints import backoff as _backoff
from abgate.engines.openai.endpoints import error_result as _error_result
from abgate.engines.openai.endpoints import first_error as _first
from abgate.engines.openai.options import (
    ARG_SPECS,
    Options,
    api_key,
    check_llama_cpp_concurrency,
    check_options,
)
from abgate.engines.shared import http
from abgate.engines.shared import server as srv
from abgate.engines.shared.multicast import MULTICAST_OFF
from abgate.engines.shared.process_roles import parallel_sizes
from abgate.errors import AbgateError, UsageError

NAME = "openai"
__all__ = ["ARG_SPECS", "NAME", "OpenAIEngine", "Options", "ServerGone", "check_options",
           "load", "resolve_model"]


class OpenAIEngine(Engine):
    """A served engine, reached over HTTP."""

    name = NAME
    arg_specs = ARG_SPECS

    @classmethod
    def resolve_model(cls, model: str | None) -> str:
        """A model file is made absolute (so it is hashed and ``{model}`` is exact); any
        other name is passed on. No model: the server's only model is used at load."""
        if model is None:
            return ""
        path = Path(model).expanduser()
        return str(path.resolve()) if path.is_file() else model


    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        check_options(options)

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> OpenAIEngine:
        opts = Options.parse(options or {})
        if args and not opts.launch:
            raise UsageError("--engine-arg sets a launched server's flags; with --endpoint the "
                             "server is already running (configure it where it is started)")
        check_llama_cpp_concurrency(opts, args)
        if not model and opts.launch and "{model}" in opts.launch:
            from abgate.engines.shared.default_model import default_model_path  # as llamacpp
            model = str(default_model_path().resolve())
        key = api_key(opts.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        server = None
        if opts.launch:
            server = srv.launch(opts.launch, model=model, args=args, log_dir=run_dir,
                                ready_timeout=opts.ready_timeout, grace_s=opts.grace_s,
                                bool_style=opts.bool_style, api_key=key, headers=headers)
            opts = replace(opts, endpoints=(server.base_url,))
        try:
            return cls(model, opts, headers, server)
        except BaseException as exc:
            if server is None:
                raise
            evidence = server.stop()
            if isinstance(exc, AbgateError):
                exc.cleanup_evidence = evidence  # type: ignore[attr-defined]
            raise

    def __init__(self, model: str, opts: Options, headers: Mapping[str, str],
                 server: srv.ManagedServer | None) -> None:
        self.opts, self.headers, self.server = opts, dict(headers), server
        self.requested_model = model
        self.stats = [EndpointStats(u.rstrip("/")) for u in opts.endpoints]
        self.cleanup_evidence: dict[str, Any] | None = None
        # a launched server got multicast off (server.py); a remote one is not ours to know
        self.process_env = dict(MULTICAST_OFF) if server is not None else {}
        self._rr = 0
        self.info = discover(self.stats, self.headers, self.opts, model)
        self.eog_ids = tp.eog_ids(model)
        self.scorer = sc.Scorer(self.info.dialect.kind, self.stats[0].url, self.headers,
                                self.info.model, opts.request_timeout)
        self.capabilities = Capabilities(
            token_ids=self.info.probe.get("token_ids", False), logprobs=False, streaming=True,
            chat_template=True, concurrent=True, engine_timings=False,
            scoring=self.scorer.route.method)
        self.chat = cr.choose(self.stats[0].url, self.headers, self.info.dialect.kind,
                              self.info.model, model, self.info.probe["prompt_token_ids"],
                              self.info.dialect.token_id_prompts)

    def _url(self, base: str, api: str | None = None) -> str:
        return base + PATHS[api or self.opts.api]

    @staticmethod
    def _api_for(req: GenerationRequest) -> str:
        """Chat messages go through the chat API; a raw prompt or exact token IDs (bench
        prompts, probes of a given length) through completions, whatever ``--api``."""
        return "chat" if req.messages is not None else "completions"

    # -- the protocol -------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        results: dict[str, GenerationResult] = {}

        def done(r: GenerationResult) -> None:
            results[r.request_id] = r
            if on_result is not None:
                on_result(r)

        asyncio.run(self._run_all(requests, done))
        return [results[r.id] for r in requests]

    def tokenize(self, text: str) -> list[int]:
        base, model = self.stats[0].url, self.info.model
        attempts = [("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False}),
                    ("/tokenize", {"content": text, "add_special": False}),
                    ("/extras/tokenize", {"model": model, "input": text})]
        with http.client(base_url=base, headers=self.headers, timeout=30.0) as c:
            for path, body in attempts:
                with st.suppress_http():
                    resp = c.post(path, json=body)
                    tokens = resp.json().get("tokens") if resp.status_code == 200 else None
                    if isinstance(tokens, list) and (tokens or not text):  # llama-server
                        return [int(t) for t in tokens]  # answers vLLM's body with []
        raise AbgateError(f"{self.stats[0].shown}: the server offers no tokenize endpoint "
                          "abgate knows")

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        """By the server where it can, else on the client (:mod:`openai_chat_render`)."""
        return self.chat.render_ids(self.stats[0].url, messages)

    def describe(self) -> EngineInfo:
        o, info = self.opts, self.info
        effective: dict[str, Any] = {
            "server_kind": info.dialect.kind,
            "served_models": info.models,
            "requested_model": self.requested_model or None,
            "endpoints": [s.shown for s in self.stats],
            "launch": self.server.shown if self.server else None,
            "server_log": str(self.server.log_path) if self.server else None,
            "server_ready_s": self.server.ready_s if self.server else None,
            "api": o.api,
            "concurrency": o.concurrency,
            "request_timeout_s": o.request_timeout,
            "retries": o.retries,
            "retry_policy": "only failures before any output; not timeouts, not HTTP 4xx "
                            "but 408/429; waits the server's Retry-After (at most "
                            f"{RETRY_AFTER_CAP_S:g} s)",
            "api_key_env": o.api_key_env,
            "probe": info.probe,
            "chat_prompts": self.chat.describe(),
            "scoring": self.scorer.route.to_dict(),
            "token_ids": info.dialect.token_ids,
            "prefix_cache": (f"isolated per request ({info.dialect.cache_salt})"
                             if info.dialect.cache_salt else "the server's setting"),
            "ignore_eos": "server parameter" if info.dialect.ignore_eos else (
                f"logit bias {tp.EOG_BIAS:g} on end-of-generation tokens {list(self.eog_ids)}"
                if self.eog_ids else "not possible"),
            "token_counts": "server usage" if info.probe.get("usage")
            else "streamed chunks (the server reports no usage when streaming)",
            "sampling_sent": {**st.FIXED_SAMPLING, "top_k_disabled_as": info.dialect.top_k_off,
                              **info.dialect.extra,
                              "per_request": ["max_tokens", "temperature", "top_p", "top_k",
                                              "seed", "stop", "ignore_eos"]},
        }
        if self.server is not None:  # vLLM's / SGLang's ranks, as the server started them
            effective.update(parallel_sizes(self.server.roles()))
        return EngineInfo(name=NAME, version=info.version, model=info.model,
                          effective_config=effective, capabilities=self.capabilities)

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        """Top-k teacher-forced log-probs, asked of the server in its own terms
        (:mod:`openai_scoring`); servers with no way to do it raise AbgateError."""
        return self.scorer.score(prompt_token_ids, continuation, top_k)

    def processes(self) -> list[int]:
        """A launched server's process tree; none for a remote endpoint (its processes
        are on another host, or not ours to describe)."""
        return self.server.pids() if self.server else []

    def close(self) -> None:
        """Stop a launched server (verified) and leave the evidence; idempotent."""
        if self.cleanup_evidence is not None:
            return
        self.scorer.close()
        server = self.server.stop() if self.server else None
        self.cleanup_evidence = {
            "launched": server is not None,
            "server": server,
            "verified": server["verified"] if server else None,
            "endpoint_stats": [s.to_dict() for s in self.stats],
        }

    # -- running requests ---------------------------------------------------------------

    async def _run_all(self, requests: Sequence[GenerationRequest],
                       done: Callable[[GenerationResult], None]) -> None:
        queue = iter(requests)
        timeout = httpx.Timeout(self.opts.request_timeout, connect=30.0)

        async def worker() -> None:
            # a client (connection pool) per worker: its requests run one at a time, so
            # it keeps one connection per endpoint alive. One pool shared by all workers
            # costs O(connections) per pool operation in httpcore: at concurrency 64 the
            # client spent 3x the CPU per token (benchmarks/client_ceiling.py)
            async with http.async_client(headers=self.headers, timeout=timeout) as client:
                for req in queue:
                    done(await self._run_one(client, req))

        try:
            async with asyncio.TaskGroup() as tg:
                for _ in range(min(self.opts.concurrency, max(1, len(requests)))):
                    tg.create_task(worker())
        except BaseExceptionGroup as group:
            raise _first(group) from None

    def _pick(self) -> EndpointStats:
        """The endpoint with the fewest requests in flight (round-robin among ties)."""
        low = min(s.in_flight for s in self.stats)
        ties = [s for s in self.stats if s.in_flight == low]
        self._rr += 1
        return ties[self._rr % len(ties)]

    async def _run_one(self, client: httpx.AsyncClient,
                       req: GenerationRequest) -> GenerationResult:
        ep = self._pick()
        ep.in_flight += 1
        ep.requests += 1
        t0 = time.perf_counter()
        try:
            result = await self._attempts(client, req, ep)
        except BaseException:  # cut off (the server died, or the run ends): no sample
            ep.errors += 1
            ep.cut_off += 1
            raise
        finally:
            ep.in_flight -= 1
            ep.busy_s += time.perf_counter() - t0
        ep.errors += result.finish_reason == "error"
        ep.output_tokens += result.output_tokens
        return result

    async def _attempts(self, client: httpx.AsyncClient, req: GenerationRequest,
                        ep: EndpointStats) -> GenerationResult:
        failures: list[str] = []
        t_submit = time.perf_counter()
        try:
            req, planned = await self._prepared(client, req, ep)
        except st.RequestFailed as exc:
            return _error_result(req, t_submit, str(exc), ep, 0)
        body = self._body(req)
        for attempt in range(self.opts.retries + 1):
            try:
                async with asyncio.timeout(self.opts.request_timeout):
                    api = self._api_for(req)
                    state = await st.stream_once(client, self._url(ep.url, api), body, api)
                if state.prompt_token_ids is None and planned is not None:
                    state.prompt_token_ids = planned  # sent as IDs, or as text checked to
                return self._result(req, state, ep, attempt)  # tokenize back to them
            except TimeoutError:
                failures.append(f"timed out after {self.opts.request_timeout:g} s")
                break
            except st.RequestFailed as exc:
                failures.append(str(exc))
                last = attempt == self.opts.retries or exc.started or not exc.transient
                await self._check_alive(ep, exc, last)
                if last:
                    break
                ep.retries += 1
                await asyncio.sleep(_backoff(attempt, exc.retry_after))
        message = "; ".join(f"attempt {i + 1}: {f}" for i, f in enumerate(failures))
        return _error_result(req, t_submit, message, ep, len(failures))

    async def _prepared(self, client: httpx.AsyncClient, req: GenerationRequest,
                        ep: EndpointStats) -> tuple[GenerationRequest, list[int] | None]:
        """``req`` as sent (a chat rendered by the server, IDs as text where it takes only
        text) and the prompt IDs planned; retried as a generation is (seen: llama-server
        closing a kept-alive connection as ``/apply-template`` reused it)."""
        planned = list(req.prompt_token_ids) if req.prompt_token_ids is not None else None

        async def step() -> tuple[GenerationRequest, list[int] | None]:
            sent, rendered = await self.chat.to_request(client, req, ep.url)
            return (await self._as_text(client, sent, ep.url),
                    rendered if rendered is not None else planned)

        return await retried(step, self.opts.retries, ep,
                             lambda exc, last: self._check_alive(ep, exc, last))

    @property
    def text_stable(self) -> Callable[[list[int]], bool] | None:
        """For servers whose completions API takes only text: the check that a token-ID
        prompt survives the server's text round trip (bench prompts are chosen so that
        it does); None where token IDs are sent as they are."""
        if self.info.dialect.token_id_prompts:
            return None
        return partial(tp.survives_text, self.stats[0].url, self.headers)

    async def _as_text(self, client: httpx.AsyncClient, req: GenerationRequest,
                       url: str) -> GenerationRequest:
        if req.prompt_token_ids is None or self.info.dialect.token_id_prompts:
            return req
        return await tp.as_text(client, req, url, self.info.dialect.kind)

    def _body(self, req: GenerationRequest) -> dict[str, Any]:
        if self.opts.api == "completions" and req.messages is not None:
            raise st.RequestFailed("--api completions takes prompt text or token IDs; chat "
                                   "messages need --api chat")
        body = st.request_body(req, self._api_for(req), self.info.model, self.info.dialect)
        if req.params.ignore_eos and not self.info.dialect.ignore_eos:
            if not self.eog_ids:
                raise st.RequestFailed(f"{self.info.dialect.kind} cannot ignore EOS, and no "
                                       "end-of-generation token IDs are known to bias away "
                                       "(give --model PATH.gguf)")
            body["logit_bias"] = {str(i): tp.EOG_BIAS for i in self.eog_ids}
        return body

    async def _check_alive(self, ep: EndpointStats, exc: st.RequestFailed, last: bool) -> None:
        """Raise :class:`ServerGone` when the failure is the server's, not the request's.
        A launched server that answered with an HTTP error status is alive and only
        polled; any other failure (refused, cut off) gives it a second to finish dying."""
        if self.server is not None:
            grace = 0.0 if exc.answered else 1.0
            if await asyncio.to_thread(self.server.died_within, grace):
                raise ServerGone(f"the launched server exited with code "
                                 f"{self.server.proc.returncode} during the run (log: "
                                 f"{self.server.log_path}); last lines: "
                                 f"{self.server.log_tail()}")
            return
        if exc.connect and last:
            raise ServerGone(f"endpoint {ep.shown} refuses connections: {exc}")
        if exc.started and not await st.reachable(ep.url, self.headers):
            raise ServerGone(f"endpoint {ep.shown} stopped answering mid-stream: {exc}")

    def _result(self, req: GenerationRequest, s: st.StreamState, ep: EndpointStats,
                attempt: int) -> GenerationResult:
        return stream_result(req, s, ep, self.stats.index(ep), attempt,
                             self.info.probe.get("usage", False))


resolve_model = OpenAIEngine.resolve_model
load = OpenAIEngine.load  # the module's names: the class's own
