"""What the openai adapter learns from a server at load: the served models, the
server's dialect and version, and one tiny probe request per endpoint (the server
works, and what its stream carries)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from abgate.engines.base import GenerationRequest, SamplingParams
from abgate.engines.openai import stream as st
from abgate.engines.openai.endpoints import EndpointStats
from abgate.engines.openai.options import Options
from abgate.engines.shared import http
from abgate.errors import AbgateError
from abgate.redact import redact_url

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass
class ServerInfo:
    """What the server said about itself at load."""

    model: str
    dialect: st.Dialect
    version: str
    models: list[dict[str, Any]] = field(default_factory=list)
    probe: dict[str, bool] = field(default_factory=dict)


def discover(stats: Sequence[EndpointStats], headers: Mapping[str, str], opts: Options,
         model: str) -> ServerInfo:
    """The server's models, dialect and version, and a probe of every endpoint."""
    base = stats[0].url
    with http.client(base_url=base, headers=headers, timeout=30.0) as c:
        try:
            models = c.get("/v1/models").raise_for_status().json()
        except (httpx.HTTPError, ValueError) as exc:
            raise AbgateError(f"cannot list the models at {stats[0].shown}/v1/models: "
                              f"{exc}") from None
        title, version = st.server_version(c)
    ids = [str(m.get("id")) for m in models.get("data", [])]
    info = ServerInfo(st.pick_model(model, ids), st.identify(models, title), version,
                      list(models.get("data", [])))
    probes = [probe(s.url, info, headers, opts) for s in stats]
    info.probe = {k: all(p[k] for p in probes) for k in probes[0]}
    return info


def probe(url: str, info: ServerInfo, headers: Mapping[str, str],
          opts: Options) -> dict[str, bool]:
    """One tiny greedy request: the server works, and what its stream carries."""
    msgs = ({"role": "user", "content": "Say OK."},)
    req = GenerationRequest(id="probe", params=SamplingParams(max_tokens=2),
                            messages=msgs if opts.api == "chat" else None,
                            prompt=None if opts.api == "chat" else "OK")
    body = st.request_body(req, opts.api, info.model, info.dialect)

    async def once() -> st.StreamState:
        async with http.async_client(headers=headers, timeout=60.0) as client:
            return await st.stream_once(client, url + PATHS[opts.api], body,
                                        opts.api)

    try:
        state = asyncio.run(once())
    except st.RequestFailed as exc:
        raise AbgateError(f"probe request to {redact_url(url)} failed: {exc}") from None
    return {"usage": state.usage is not None, "token_ids": state.token_ids is not None,
            "prompt_token_ids": state.prompt_token_ids is not None}
