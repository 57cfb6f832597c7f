"""What a served bench needs from servers that take no token IDs and cannot ignore EOS
(llama-cpp-python's server): token-ID prompts sent as text that provably tokenizes back
to the same IDs, and ``ignore_eos`` as a logit bias on end-of-generation tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx

from abgate.engines.base import GenerationRequest
from abgate.engines.openai import stream as st
from abgate.engines.shared import http
from abgate.gguf_file import read_gguf

EOG_BIAS = -1.0e4  # logit bias that keeps end-of-generation tokens from being sampled
_EOG_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
             "tokenizer.ggml.eom_token_id")


def eog_ids(model: str) -> tuple[int, ...]:
    """End-of-generation token IDs from a GGUF model's metadata: how ``ignore_eos`` is
    honoured (a logit bias) on servers without an ``ignore_eos`` parameter."""
    path = Path(model) if model else None
    if path is None or path.suffix != ".gguf" or not path.is_file():
        return ()
    meta = read_gguf(path).metadata
    return tuple(sorted({v for k in _EOG_KEYS if isinstance(v := meta.get(k), int)}))


def survives_text(base_url: str, headers: dict[str, str], ids: list[int]) -> bool:
    """Whether the server's detokenize -> tokenize round trip gives back ``ids``."""
    with http.client(base_url=base_url, headers=headers, timeout=30.0) as c:
        text = c.post("/extras/detokenize", json={"tokens": ids}).json()["text"]
        back = c.post("/extras/tokenize", json={"input": text}).json()["tokens"]
    return list(back) == list(ids)


async def as_text(client: httpx.AsyncClient, req: GenerationRequest, url: str,
                  kind: str) -> GenerationRequest:
    """``req``'s token-ID prompt as text made by the server's own detokenizer; its
    tokenizer must give back exactly the same IDs (checked per request), so the prompt
    sent is the prompt planned. A prompt that does not survive is a failed request."""
    ids = list(req.prompt_token_ids or ())
    try:
        text = (await client.post(url + "/extras/detokenize", json={"tokens": ids})).json()[
            "text"]
        back = (await client.post(url + "/extras/tokenize", json={"input": text})).json()[
            "tokens"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise st.RequestFailed(f"{kind} takes no token-ID prompts and its detokenize/"
                               f"tokenize endpoints failed: {exc}") from None
    if list(back) != ids:
        raise st.RequestFailed(f"{kind} takes no token-ID prompts and this prompt "
                               f"({len(ids)} tokens) does not survive the text round trip "
                               f"({len(back)} tokens back)")
    return replace(req, prompt=text, prompt_token_ids=None)
