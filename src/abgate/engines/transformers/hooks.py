"""Per-request bookkeeping of the ``transformers`` engine inside ``generate()``: token
arrival times from a streamer, stopping decided from the sequence, CUDA-event (or host
clock) prefill/decode timing, and the logits processor that forces a continuation for
teacher-forced scoring through the decode steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from abgate.engines.base import SamplingParams


class _Watch:
    """One request's host-side bookkeeping. The streamer hands over each accepted token
    the moment it reaches the host (timestamped then); the stopping criterion decides
    from the sequence alone (some transformers versions also ask it about speculative
    candidates); the timing marks are CUDA events or host clock readings."""

    def __init__(self, torch: Any, cuda: bool, eos: Collection[int],
                 detokenize: Callable[[Sequence[int]], str], p: SamplingParams,
                 prompt_len: int) -> None:
        self.p, self.prompt_len = p, prompt_len
        self.torch, self.cuda, self.eos, self.detokenize = torch, cuda, eos, detokenize
        self.streamed: list[int] = []
        self.times: list[float] = []
        self.start: Any = None
        self.forward_done: list[Any] = []  # one per forward pass that produced logits
        self.on_host: list[Any] = []  # one per streamed batch of tokens

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def put(self, value: Any) -> None:
        """The streamer: the prompt first, then each step's accepted tokens."""
        tokens = [int(t) for t in value.reshape(-1).tolist()]
        now = time.perf_counter()
        if self.start is None:
            self.start = self.mark()
            return
        self.on_host.append(self.mark())
        self.streamed += tokens
        self.times += [now] * len(tokens)

    def logits_ready(self) -> None:
        self.forward_done.append(self.mark())

    def cut(self, generated: list[int]) -> tuple[list[int], Any, str | None]:
        """``(kept tokens, finish reason, text cut at a stop string or None)``: EOS ends
        the output and is not kept (unless ``ignore_eos``), as do a stop string and
        ``max_tokens``."""
        p, eos = self.p, self.eos
        out: list[int] = []
        for tok in generated:
            if not p.ignore_eos and tok in eos:
                return out, "stop", None
            out.append(tok)
            if p.stop:
                text = self.detokenize(out)
                hits = [i for i in (text.find(s) for s in p.stop) if i >= 0]
                if hits:
                    return out, "stop", text[: min(hits)]
            if len(out) >= p.max_tokens:
                break
        return out, "length", None

    def should_stop(self, input_ids: Any) -> bool:
        out, finish, _ = self.cut(input_ids[0, self.prompt_len:].tolist())
        return bool(finish == "stop" or len(out) >= self.p.max_tokens)

    def _ms(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) if self.cuda else (b - a) * 1000.0

    def engine_timings(self, n: int, prompt_tokens: int) -> dict[str, float]:
        """Prefill: start mark to the first forward's end; decode: for each of the ``n``
        kept tokens after the first, the previous token on the host to the end of the
        forward pass that produced it."""
        if n == 0 or self.start is None or len(self.forward_done) < n or \
                len(self.on_host) < n - 1:
            return {}
        if self.cuda:
            self.torch.cuda.synchronize()
        prefill = self._ms(self.start, self.forward_done[0])
        decode = sum(self._ms(self.on_host[k - 1], self.forward_done[k]) for k in range(1, n))
        return {"prompt_eval_ms": prefill, "prompt_eval_tokens": prompt_tokens,
                "eval_ms": decode, "eval_tokens": n - 1}


def _hooks(tf: Any, watch: _Watch, timed: bool) -> dict[str, Any]:
    """``generate`` keyword arguments carrying the watch: the streamer (tokens on the
    host), the stopping criterion, and where timed an identity logits processor (the
    forward pass has ended). generate() calls them by duck typing."""
    hooks: dict[str, Any] = {"streamer": _Stream(watch),
                             "stopping_criteria": tf.StoppingCriteriaList([_Arrived(watch)])}
    if timed:
        hooks["logits_processor"] = tf.LogitsProcessorList([_ForwardDone(watch)])
    return hooks


class _Arrived:
    """Stopping criterion: EOS, a stop string or max_tokens in the sequence."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        stop = self.watch.should_stop(input_ids)
        torch = self.watch.torch
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool,
                          device=input_ids.device)


class _ForwardDone:
    """Identity logits processor: the forward pass that made these logits has ended."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.watch.logits_ready()
        return scores


class _Force:
    """Logits processor for teacher forcing: keep each step's raw logits, then allow only
    the continuation's next token."""

    def __init__(self, torch: Any, prompt_len: int, cont: list[int]) -> None:
        self.torch, self.prompt_len, self.cont = torch, prompt_len, cont
        self.rows: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        step = int(input_ids.shape[1]) - self.prompt_len
        self.rows.append(scores[0].clone())
        forced = self.torch.full_like(scores, float("-inf"))
        forced[:, self.cont[min(step, len(self.cont) - 1)]] = 0.0
        return forced


class _Stream:
    """Streamer: the prompt first, then each step's accepted tokens."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def put(self, value: Any) -> None:
        self.watch.put(value)

    def end(self) -> None:
        pass
