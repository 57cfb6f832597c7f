"""Teacher-forced top-k scoring through a server's own API (engine ``openai``).

The OpenAI API has no way to score a given continuation, so each server kind is asked
in its own terms, always with the exact token IDs (never re-tokenized text):

- **vLLM**: one ``/v1/completions`` request whose prompt is the prompt and the
  continuation's IDs, with ``prompt_logprobs = k`` (vLLM's extension): the top-k of
  every prompt position plus the prompt token's own log-prob, from the raw logits.
  ``k`` is capped by the server's ``--max-logprobs`` (20 by default).
- **llama.cpp's llama-server**: ``n_probs`` only describes *generated* tokens, so each
  position is one ``/completion`` request for one token after the prompt and the
  first ``j`` continuation tokens, with ``n_probs = k`` (pre-sampling probabilities:
  a softmax of the raw logits) and ``cache_prompt``, so each request evaluates one new
  token. The scored token's own log-prob is known only when it is in the top-k.
- **SGLang**: its native ``/generate`` with ``input_ids``, ``return_logprob`` and
  ``top_logprobs_num = k`` from the last prompt position on (one request per sequence);
  the token IDs it returns for those positions are checked against the continuation.
- llama-cpp-python's server accepts text prompts only and keys its log-probs by token
  text: no scoring (the A/B says why).

The result is a :class:`~abgate.engines.base.TokenScores` with method ``top_k``; the
A/B turns two of them into a lower bound of the KL (:mod:`abgate.compare.topk_kl`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from abgate.engines.base import ScoringMethod, TokenScores
from abgate.engines.shared import http
from abgate.engines.shared.prompt_logprobs import number, scores_from_rows
from abgate.errors import AbgateError

__all__ = ["Route", "Scorer", "route"]


@dataclass(frozen=True)
class Route:
    """How (or why not) a server kind scores teacher-forced sequences."""

    method: ScoringMethod | None
    how: str | None = None
    why_not: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ROUTES: Mapping[str, Route] = {
    "vllm": Route("top_k", "/v1/completions with prompt_logprobs over prompt + continuation "
                           "token IDs (one request per sequence)"),
    "llama.cpp": Route("top_k", "/completion with n_probs for one token after each prefix "
                                "of the continuation (one request per position, prompt "
                                "cache on)"),
    "llama-cpp-python": Route(None, why_not=(
        "llama-cpp-python's server takes text prompts only and reports log-probs keyed by "
        "token text, so the baseline's token IDs cannot be forced; serve the model with "
        "llama.cpp's llama-server or vLLM to score it")),
    "sglang": Route("top_k", "/generate with input_ids, return_logprob and top_logprobs_num "
                             "from the last prompt position (one request per sequence; the "
                             "returned input token IDs are checked against the continuation)"),
}


def route(kind: str) -> Route:
    return ROUTES.get(kind, Route(None, why_not=f"server kind {kind!r}: no known way to "
                                                "score given token IDs"))


class Scorer:
    """Scores sequences on one server (one HTTP client, reused)."""

    def __init__(self, kind: str, base_url: str, headers: Mapping[str, str], model: str,
                 timeout: float) -> None:
        self.route = route(kind)
        self.kind, self.model = kind, model
        self._client = http.client(base_url=base_url, headers=dict(headers),
                                   timeout=httpx.Timeout(timeout, connect=30.0))

    def close(self) -> None:
        self._client.close()

    def score(self, prompt: Sequence[int], continuation: Sequence[int],
              k: int) -> TokenScores:
        prompt, cont = [int(t) for t in prompt], [int(t) for t in continuation]
        if not prompt or not cont:
            raise ValueError("scoring needs a non-empty prompt and continuation")
        if self.route.method is None:
            raise AbgateError(f"cannot score on this server: {self.route.why_not}")
        if self.kind == "vllm":
            return self._vllm(prompt, cont, k)
        if self.kind == "sglang":
            return self._sglang(prompt, cont, k)
        return self._llama_server(prompt, cont, k)

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        try:
            resp = self._client.post(path, json=dict(body))
        except httpx.HTTPError as exc:
            raise AbgateError(f"scoring request {path} failed: {exc}") from None
        if resp.status_code != 200:
            hint = (" (vLLM caps it with --max-logprobs)" if "logprobs" in resp.text
                    and self.kind == "vllm" else "")
            raise AbgateError(f"scoring request {path}: HTTP {resp.status_code}: "
                              f"{resp.text[:300]}{hint}")
        try:
            return resp.json()
        except ValueError:
            raise AbgateError(f"scoring request {path}: the answer is not JSON") from None

    def _vllm(self, prompt: list[int], cont: list[int], k: int) -> TokenScores:
        body = {"model": self.model, "prompt": prompt + cont, "max_tokens": 1,
                "temperature": 0.0, "prompt_logprobs": k, "stream": False}
        answer = self._post("/v1/completions", body)
        try:
            rows = answer["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise AbgateError("scoring: the vLLM answer has no choices[0].prompt_logprobs") \
                from None
        return scores_from_rows(rows, prompt, cont, k)

    def _sglang(self, prompt: list[int], cont: list[int], k: int) -> TokenScores:
        """SGLang's native ``/generate``: ``meta_info.input_token_logprobs`` holds
        ``[logprob, token_id, text]`` and ``input_top_logprobs`` a list of those per input
        position from ``logprob_start_len`` on. The last ``len(cont)`` positions are the
        continuation's, and their token IDs must be the continuation's."""
        body = {"input_ids": prompt + cont, "return_logprob": True, "top_logprobs_num": k,
                "logprob_start_len": len(prompt) - 1,
                "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
        answer = self._post("/generate", body)
        try:
            meta = answer["meta_info"]
            own_rows, top_rows = meta["input_token_logprobs"], meta["input_top_logprobs"]
            if len(own_rows) < len(cont) or len(top_rows) < len(cont):
                raise ValueError
            own_rows, top_rows = own_rows[-len(cont):], top_rows[-len(cont):]
            ids = [int(row[1]) for row in own_rows]
            own = [None if row[0] is None else number(row[0], "input_token_logprobs")
                   for row in own_rows]
            tops = [[(int(e[1]), number(e[0], "input_top_logprobs")) for e in row or ()]
                    for row in top_rows]
        except (KeyError, IndexError, TypeError, ValueError):
            raise AbgateError("scoring: the SGLang answer has no meta_info.input_token_logprobs"
                              f" / input_top_logprobs covering the {len(cont)} continuation "
                              "tokens") from None
        if ids != cont:
            raise AbgateError("scoring: SGLang's input log-probs do not line up with the "
                              "continuation's token IDs")
        return TokenScores.from_top_k(cont, tops, own, k)

    def _llama_server(self, prompt: list[int], cont: list[int], k: int) -> TokenScores:
        tops, own = [], []
        for j, token in enumerate(cont):
            body = {"prompt": prompt + cont[:j], "n_predict": 1, "n_probs": k,
                    "post_sampling_probs": False, "cache_prompt": True, "temperature": 0.0}
            answer = self._post("/completion", body)
            where = f"/completion for position {j}"
            try:
                listed = answer["completion_probabilities"][0]["top_logprobs"]
                pairs = [(int(e["id"]), number(e["logprob"], where)) for e in listed]
            except (KeyError, IndexError, TypeError, ValueError):
                raise AbgateError(f"scoring: {where}: no completion_probabilities[0]."
                                  "top_logprobs with id and logprob (a llama-server too old "
                                  "for n_probs log-probs?)") from None
            tops.append(pairs)
            own.append(next((lp for i, lp in pairs if i == token), None))
        return TokenScores.from_top_k(cont, tops, own, k)
