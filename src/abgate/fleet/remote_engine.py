"""An arm's engine on a replica, seen from the coordinator: an
:class:`~abgate.engines.base.Engine` whose members are calls to the replica actor
(``Replica.call``), so the evidence passes of one machine (``ab.phases.gather_evidence``:
the distribution-agreement pass, the health probes) run unchanged on a replica where both
arms are resident, each request under its arm's env on that replica."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
from abgate.errors import AbgateError

CALL_TIMEOUT_S = 900.0


class ReplicaEngine(Engine):
    """Arm ``arm`` of replica actor ``actor`` (``ray`` is the connected module)."""

    def __init__(self, ray: Any, actor: Any, arm: str) -> None:
        self.ray, self.actor, self.arm = ray, actor, arm
        self.info: EngineInfo = self.call("describe")
        self.capabilities: Capabilities = self.info.capabilities

    @classmethod
    def load(cls, model: str, args: Mapping[str, Any], options: Mapping[str, Any] | None = None,
             run_dir: Path | None = None) -> Engine:
        raise AbgateError("a replica's engine is loaded by its replica (abgate.fleet)")

    def call(self, op: str, *args: Any) -> Any:
        return self.ray.get(self.actor.call.remote(self.arm, op, args), timeout=CALL_TIMEOUT_S)

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        results: list[GenerationResult] = self.call("generate", list(requests))
        if on_result is not None:
            for r in results:
                on_result(r)
        return results

    def tokenize(self, text: str) -> list[int]:
        return list(self.call("tokenize", text))

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        return list(self.call("render_prompt", list(messages)))

    def describe(self) -> EngineInfo:
        return self.info

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

    @property
    def prompts_restored(self) -> int | None:
        restored: int | None = self.call("prompts_restored")
        return restored
