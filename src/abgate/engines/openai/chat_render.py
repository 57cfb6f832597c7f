"""Chat messages to the exact prompt a served engine hashes and sends (matched prompts).

An A/B needs each arm's rendered chat prompt as token IDs, and a sample's prompt SHA must
be of the tokens the server ran. The ways, in the order they are tried at load:

1. **server, chat API**: the server returns the prompt's token IDs in the chat stream
   (vLLM with ``return_token_ids``). Chat requests go to the chat API; ``render_prompt``
   asks vLLM's ``/tokenize`` with the messages.
2. **server, rendered**: the server renders its own template without generating --
   vLLM's ``/tokenize`` with messages (where its stream carries no prompt IDs), or
   llama.cpp's ``llama-server``: ``/apply-template`` {messages} -> {prompt}, then
   ``/tokenize`` {content, add_special, parse_special} (what its chat API tokenizes).
   Chat requests go to ``/v1/completions`` as those token IDs.
3. **client-rendered**: the model's own chat template (GGUF ``tokenizer.chat_template`` of
   ``--model``, rendered with llama-cpp-python's ``Jinja2ChatFormatter`` like the
   embedded engine; or the tokenizer of an HF model directory), the rendered text
   tokenized by the server's text tokenizer (``/extras/tokenize`` on llama-cpp-python,
   ``/tokenize`` on llama-server: the tokenization its completions API applies to text).
   Chat requests go to ``/v1/completions`` as exactly that text (or as the IDs, where
   the server takes token-ID prompts). An HF tokenizer tokenizes on the client, and only
   servers that take token-ID prompts get them.

With none of these, ``render_prompt`` refuses (one line) and chat requests go to the
chat API without a prompt SHA.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from abgate.engines.base import GenerationRequest, Message
from abgate.engines.openai import stream as st
from abgate.engines.shared import http
from abgate.errors import AbgateError
from abgate.gguf_file import read_gguf, token_texts

SERVER, CLIENT = "server", "client-rendered"
_PROBE_MSGS: tuple[Message, ...] = ({"role": "user", "content": "Say OK."},)
Template = Callable[[Sequence[Message]], str]


@dataclass(frozen=True)
class ClientTemplate:
    """A chat template rendered here, and how its text becomes token IDs."""

    render: Template
    origin: str  # where the template came from, in words
    bos: tuple[int, str] | None = None  # BOS id and text (a template may render it)
    hf_tokenize: Callable[[str], list[int]] | None = None  # an HF tokenizer, client side


@dataclass
class ChatPrompts:
    """How this engine turns chat messages into the prompt it hashes and sends."""

    kind: str  # server kind
    model: str  # served model name
    source: str | None  # SERVER, CLIENT, or None (no way: chat API, no prompt SHA)
    route: str  # "vllm-chat", "vllm-tokenize", "apply-template", "client", "none"
    send: str  # "chat", "token-ids" or "text"
    method: str  # in words, for the record
    template: ClientTemplate | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"prompt_sha": self.source, "method": self.method,
                "sent_as": {"chat": "chat API (/v1/chat/completions)",
                            "token-ids": "/v1/completions, the token IDs hashed",
                            "text": "/v1/completions, the rendered text hashed (its "
                                    "server tokenization)"}[self.send]}

    # -- rendering ----------------------------------------------------------------------

    async def render(self, client: httpx.AsyncClient, url: str,
                     messages: Sequence[Message]) -> tuple[list[int], str | None]:
        """The prompt's token IDs, and the text that is sent where text is sent. Any
        failure (HTTP, an odd answer, a template that raises) is :class:`RequestFailed`."""
        try:
            return await self._render(client, url, messages)
        except st.RequestFailed:
            raise
        except Exception as exc:  # a template's raise_exception, a missing field, ...
            raise st.RequestFailed(f"rendering the chat prompt ({self.route}) failed: "
                                   f"{type(exc).__name__}: {exc}") from None

    async def _render(self, client: httpx.AsyncClient, url: str,
                      messages: Sequence[Message]) -> tuple[list[int], str | None]:
        msgs = [dict(m) for m in messages]
        if self.route in ("vllm-chat", "vllm-tokenize"):
            body = {"model": self.model, "messages": msgs, "add_generation_prompt": True}
            return _tokens(await _post(client, url + "/tokenize", body)), None
        if self.route == "apply-template":
            prompt = (await _post(client, url + "/apply-template", {"messages": msgs}))["prompt"]
            return await self._tokenize(client, url, str(prompt)), str(prompt)
        if self.route == "client" and self.template is not None:
            text = self.template.render(messages)
            ids = await self._tokenize(client, url, text)
            bos = self.template.bos
            if bos and bos[1] and text.startswith(bos[1]) and ids[:2] == [bos[0], bos[0]]:
                text = text[len(bos[1]):]  # the server adds BOS itself: not twice
                ids = await self._tokenize(client, url, text)
            return ids, text
        raise st.RequestFailed(self.method)

    async def _tokenize(self, client: httpx.AsyncClient, url: str, text: str) -> list[int]:
        """``text`` tokenized as the server's completions API tokenizes prompt text."""
        if self.template is not None and self.template.hf_tokenize is not None:
            return self.template.hf_tokenize(text)
        if self.kind == "llama-cpp-python":
            body: dict[str, Any] = {"model": self.model, "input": text}
            return _tokens(await _post(client, url + "/extras/tokenize", body))
        body = {"content": text, "add_special": True, "parse_special": True}
        return _tokens(await _post(client, url + "/tokenize", body))

    def render_ids(self, url: str, messages: Sequence[Message]) -> list[int]:
        """``render`` from synchronous code (the A/B's matched-prompt check)."""
        if self.source is None:
            raise AbgateError(self.method)

        async def once() -> list[int]:
            async with http.async_client(headers=dict(self.headers), timeout=30.0) as c:
                return (await self.render(c, url, messages))[0]

        try:
            try:
                return asyncio.run(once())
            except st.RequestFailed as exc:  # a dropped kept-alive connection: once more
                if not exc.transient or exc.connect:
                    raise
            return asyncio.run(once())
        except st.RequestFailed as exc:
            raise AbgateError(f"{self.kind} server: {exc}") from None

    async def to_request(self, client: httpx.AsyncClient, req: GenerationRequest,
                         url: str) -> tuple[GenerationRequest, list[int] | None]:
        """``req`` as it is sent, and the prompt token IDs it is sent as (None: the
        server reports them, or nobody knows them)."""
        if req.messages is None or self.send == "chat":
            return req, None
        ids, text = await self.render(client, url, req.messages)
        if self.send == "text" and text is not None:
            return replace(req, messages=None, prompt=text, prompt_token_ids=None), ids
        return replace(req, messages=None, prompt=None, prompt_token_ids=tuple(ids)), ids


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Any:
    path = httpx.URL(url).path
    try:
        resp = await client.post(url, json=body)
        resp.raise_for_status()
        return resp.json()
    except httpx.HTTPStatusError as exc:  # (messages name the endpoint, never the URL)
        code = exc.response.status_code
        raise st.RequestFailed(f"{path}: HTTP {code}",
                               transient=code in st.TRANSIENT_STATUS) from None
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise st.RequestFailed(f"{path}: {type(exc).__name__}", transient=True,
                               connect=isinstance(exc, httpx.ConnectError)) from None
    except (httpx.HTTPError, ValueError) as exc:
        raise st.RequestFailed(f"{path}: {type(exc).__name__}") from None


def _tokens(doc: Any) -> list[int]:
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list):
        raise st.RequestFailed("the tokenize answer has no token list")
    return [int(t["id"] if isinstance(t, dict) else t) for t in tokens]


# -- choosing the way, at load ------------------------------------------------------------


def choose(url: str, headers: Mapping[str, str], kind: str, model: str, model_arg: str,
           stream_has_prompt_ids: bool, token_id_prompts: bool) -> ChatPrompts:
    """The first way that works on this server (see the module doc)."""
    base = ChatPrompts(kind, model, None, "none", "chat", "", headers=headers)
    if stream_has_prompt_ids:
        return replace(base, source=SERVER, route="vllm-chat",
                       method="the server returns the prompt token IDs with the chat stream; "
                              "render_prompt asks /tokenize with the messages (vLLM)")
    for route, method in (
            ("apply-template", "the server renders: /apply-template, then /tokenize "
                               "(llama.cpp's llama-server)"),
            ("vllm-tokenize", "the server renders and tokenizes: /tokenize with the "
                              "messages (vLLM)")):
        way = replace(base, source=SERVER, route=route, send="token-ids", method=method)
        if token_id_prompts and _works(way, url):
            return way
    template, why = client_template(model_arg)
    if template is not None and template.hf_tokenize is not None and not token_id_prompts:
        template, why = None, f"{kind} takes no token-ID prompts for the client's HF tokens"
    if template is not None:
        tok = ("the client's HF tokenizer" if template.hf_tokenize else
               "the server's /extras/tokenize" if kind == "llama-cpp-python"
               else "the server's /tokenize")
        way = replace(base, source=CLIENT, route="client", template=template,
                      send="token-ids" if token_id_prompts else "text",
                      method=f"chat template from {template.origin}, rendered here, "
                             f"tokenized by {tok}")
        if _works(way, url):
            return way
        why = f"{tok} did not answer"
    return replace(base, method=f"{kind} server at {url}: cannot render chat messages to "
                                f"token IDs: the server renders none (vLLM /tokenize, "
                                f"llama-server /apply-template) and {why}")


def _works(way: ChatPrompts, url: str) -> bool:
    try:
        return bool(way.render_ids(url, _PROBE_MSGS))
    except AbgateError:
        return False


def client_template(model_arg: str) -> tuple[ClientTemplate | None, str]:
    """The model's own chat template, from a GGUF ``--model`` or an HF directory."""
    path = Path(model_arg).expanduser() if model_arg else None
    if path is not None and path.is_file() and path.suffix == ".gguf":
        return gguf_template(path)
    if path is not None and (path / "tokenizer_config.json").is_file():
        return hf_template(path)
    return None, ("no chat template on the client (--model is not a GGUF file or an HF "
                  "model directory)")


def gguf_template(path: Path) -> tuple[ClientTemplate | None, str]:
    """The embedded engine's formatter (llama-cpp-python's Jinja2ChatFormatter) on the
    GGUF's ``tokenizer.chat_template``, with its BOS/EOS token text."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    meta = read_gguf(path).metadata
    template = meta.get("tokenizer.chat_template")
    if not isinstance(template, str) or not template:
        return None, f"{path.name} has no tokenizer.chat_template"
    ids = {k: v for k in ("bos", "eos")
           if isinstance(v := meta.get(f"tokenizer.ggml.{k}_token_id"), int)}
    texts = token_texts(path, set(ids.values()))
    bos, eos = texts.get(ids.get("bos", -1), ""), texts.get(ids.get("eos", -1), "")
    fmt = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

    def render(messages: Sequence[Message]) -> str:
        return str(fmt(messages=[dict(m) for m in messages]).prompt)  # type: ignore[misc]

    return ClientTemplate(render, f"the GGUF metadata of {path.name}",
                          (ids["bos"], bos) if "bos" in ids else None), ""


def hf_template(path: Path) -> tuple[ClientTemplate | None, str]:
    """An HF model directory's tokenizer: its chat template and its tokenizer."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None, "transformers is not installed (the HF tokenizer of --model)"
    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # any failure here only rules this way out
        return None, f"the HF tokenizer of {path} did not load ({type(exc).__name__})"
    if not getattr(tok, "chat_template", None):
        return None, f"{path} has no chat template"

    def render(messages: Sequence[Message]) -> str:
        return str(tok.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                           add_generation_prompt=True))

    def tokenize(text: str) -> list[int]:
        return [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]

    return ClientTemplate(render, f"the tokenizer of {path}", None, tokenize), ""
