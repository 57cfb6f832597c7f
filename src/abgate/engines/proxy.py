"""An engine that lives elsewhere: every member of the engine seam is one ``call`` to
where it is loaded. Two kinds extend it: :class:`abgate.engines.hosted.HostedEngine` (a
host process of another interpreter, over a socket pair) and
:class:`abgate.fleet.remote_engine.ReplicaEngine` (a replica's Ray actor)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from abgate.engines.base import (
    Engine,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    Message,
    OnResult,
    TokenScores,
)
from abgate.errors import AbgateError


class ProxyEngine(Engine):
    """The seam forwarded: arguments as lists, answers as the engine gave them."""

    #: Who loads it, for the error of ``load`` (a proxy is made by its own starter).
    loaded_by = "where it lives"

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> Engine:
        raise AbgateError(f"{cls.__name__} is loaded by {cls.loaded_by}")

    @abstractmethod
    def call(self, op: str, *args: Any) -> Any:
        """Engine member ``op`` called with ``args`` where the engine lives."""

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        results: list[GenerationResult] = list(self.call("generate", list(requests)))
        if on_result is not None:
            for r in results:
                on_result(r)
        return results

    def tokenize(self, text: str) -> list[int]:
        return list(self.call("tokenize", text))

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        return list(self.call("render_prompt", list(messages)))

    def describe(self) -> EngineInfo:
        info: EngineInfo = self.call("describe")
        return info

    def score(self, prompt_token_ids: Sequence[int], continuation: Sequence[int],
              top_k: int = 5) -> TokenScores:
        scores: TokenScores = self.call("score", list(prompt_token_ids), list(continuation),
                                        top_k)
        return scores

    def processes(self) -> list[int]:
        return [int(p) for p in self.call("processes")]

    def detokenize(self, ids: Sequence[int]) -> str | None:
        text: str | None = self.call("detokenize", list(ids))
        return text

    def topk_trace(self, prompt_ids: Sequence[int], output_ids: Sequence[int],
                   k: int) -> list[list[int]] | None:
        trace: list[list[int]] | None = self.call("topk_trace", list(prompt_ids),
                                                  list(output_ids), k)
        return trace

    def keep_prompt_states(self, budget_bytes: int = 512 * 2**20) -> bool:
        return bool(self.call("keep_prompt_states", budget_bytes))

    @property
    def prompts_restored(self) -> int | None:
        restored: int | None = self.call("prompts_restored")
        return restored
