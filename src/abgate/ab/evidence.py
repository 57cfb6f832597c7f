"""Quality evidence beyond the samples, gathered per arm in an A/B.

- **Distribution agreement**: every arm scores the *same* token sequences, the baseline
  arm's own outputs, teacher-forced (``Engine.score``); per position, KL(baseline ‖
  candidate), both arms' top tokens and the scored token's log-prob in each. One line
  per (item, seed) goes to ``arms/<candidate>/agreement.jsonl``, appended and fsynced
  as it is computed, so an interrupted pass resumes where it stopped. This sees numeric
  damage where accuracy cannot (a small model at its accuracy floor). Engines with the
  full distribution give the exact KL; served engines report their top-k (``SCORE_K``),
  and a row with one such arm carries a lower bound of the KL
  (:mod:`abgate.compare.topk_kl`).
- **Health probes** (arithmetic, copy, mid-context retrieval; :mod:`abgate.bench.probes`)
  per arm into ``arms/<arm>/probes.json``; a probe the baseline passes and a candidate
  fails is a failing gate.

The statistics over these files are :mod:`abgate.compare.agreement` (pure); the cost of
the pass (seconds per arm) goes to ``scoring`` in ``ab.json``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from abgate.ab.analyze import AGREEMENT_FILE, PROBES_FILE, read_agreement
from abgate.ab.shards import Shards
from abgate.bench.probes import default_probes, run_probes
from abgate.compare.agreement_rows import AgreementRow
from abgate.compare.topk_kl import kl_lower_bound
from abgate.engines import keys
from abgate.engines.base import TokenScores
from abgate.errors import AbgateError, UsageError
from abgate.progress import Step
from abgate.records.documents import AbRecord, ScoringCost
from abgate.records.samples import Sample, ids_sha256
from abgate.records.side_documents import ProbesDocument
from abgate.runner import records as rec
from abgate.runner.documents import write_record
from abgate.runner.samples import load_samples
from abgate.runner.session import EngineSession

log = logging.getLogger("abgate.ab")
TOP_N = 5  # top tokens kept per position in agreement.jsonl (for the report)
# log-probs asked of each arm per position: a top-k engine's bound is over these cells
SCORE_K = 20
Prompt = Callable[[Sample], list[int]]  # sample -> the prompt token IDs it had
Detok = Callable[[list[int]], str | None]  # token IDs -> text, None where unknown
OnStart = Callable[[int, int, str], None]  # (done, total, phase): a progress phase begins
OnStep = Callable[[Step], None]  # one step done: a scored sequence's tokens


def _top(scores: TokenScores, detok: Detok | None) -> list[list[Any]]:
    """Each position's top tokens as ``[id, logprob]``, plus the token's text where the
    engine can detokenize."""
    out = []
    for ids, lps in zip(scores.top_ids[:, :TOP_N].tolist(),
                        scores.top_logprobs[:, :TOP_N].tolist(), strict=True):
        row = []
        for i, lp in zip(ids, lps, strict=True):
            if i >= 0 and math.isfinite(lp):
                text = detok([i]) if detok else None
                row.append([i, round(lp, 5), *([text] if text is not None else [])])
        out.append(row)
    return out


def _reported(scores: TokenScores, j: int, also: Sequence[int] = ()) -> dict[int, float]:
    """Token -> log-prob as one arm reported it at position ``j``: its top-k and the
    scored token, plus ``also`` where the arm has the full distribution."""
    out = {int(i): float(lp) for i, lp in zip(scores.top_ids[j].tolist(),
                                               scores.top_logprobs[j].tolist(), strict=True)
           if i >= 0 and math.isfinite(lp)}
    own = float(scores.token_logprobs[j])
    if math.isfinite(own):
        out[scores.tokens[j]] = own
    if scores.logprobs is not None:
        out |= {int(i): float(scores.logprobs[j, i]) for i in also}
    return out


def _kth(scores: TokenScores, j: int) -> float:
    """The most probability a token the arm did not list at ``j`` can have: its k-th
    listed probability (1 when the list is short; 0 with the full distribution)."""
    if scores.logprobs is not None:
        return 0.0  # nothing is unreported
    listed = scores.top_logprobs[j][np.isfinite(scores.top_logprobs[j])]
    return math.exp(float(listed.min())) if listed.size == scores.top_ids.shape[1] else 1.0


def _kl_top_k(base: TokenScores, cand: TokenScores) -> list[float]:
    """Per position, the lower bound of KL(baseline || candidate) from what both arms
    reported (:func:`abgate.compare.topk_kl.kl_lower_bound`)."""
    out = []
    for j in range(len(base.tokens)):
        b = _reported(base, j)
        c = _reported(cand, j, also=list(b))
        out.append(kl_lower_bound(b, c, _kth(cand, j)))
    return out


def _logps(values: npt.NDArray[np.float32]) -> list[float | None]:
    return [round(float(x), 6) if math.isfinite(x) else None for x in values.tolist()]


def agreement_row(sample: Sample, base: TokenScores, cand: TokenScores,
                  detok: Detok | None = None,
                  source: str = "baseline_output") -> AgreementRow:
    """One ``agreement.jsonl`` line: the candidate against the baseline on one sequence.
    Both arms scored over the full vocabulary: the exact KL ("full"); else the lower
    bound from the top-k both reported ("top_k", with the smaller k)."""
    if base.tokens != cand.tokens:
        raise AbgateError("the two arms scored different token sequences")
    if base.logprobs is not None and cand.logprobs is not None:
        la, lb = base.logprobs, cand.logprobs  # float32; the sums in float64
        kl = np.maximum((np.exp(la) * (la - lb)).sum(axis=1, dtype=np.float64), 0.0).tolist()
        method, k = "full", None
    else:
        kl = _kl_top_k(base, cand)
        method, k = "top_k", min(base.top_ids.shape[1], cand.top_ids.shape[1])
    return AgreementRow(
        key=sample.key, item_id=sample.item_id, seed=sample.seed, source=source,
        method=method, k=k, tokens=list(base.tokens), kl=[float(f"{x:.6g}") for x in kl],
        top1_base=base.top_ids[:, 0].tolist(), top1_cand=cand.top_ids[:, 0].tolist(),
        logp_base=_logps(base.token_logprobs), logp_cand=_logps(cand.token_logprobs),
        top_base=_top(base, detok), top_cand=_top(cand, detok))


def scorable(samples: Sequence[Sample]) -> list[Sample]:
    """Baseline samples with an output to score (errors and empty outputs carry none)."""
    return [s for s in samples if s.measured and s.finish_reason != "error"
            and (s.output.token_ids or s.output.text)]


def continuation(sample: Sample, session: EngineSession) -> tuple[list[int], str]:
    """The token IDs to score for a baseline sample and where they came from: the IDs it
    generated, or (servers whose API returns none, e.g. llama-server) its output text
    tokenized by the baseline engine, a sequence with the same text."""
    ids = sample.output.token_ids
    if ids:
        return [int(t) for t in ids], "baseline_output"
    with session.env():
        return session.engine.tokenize(sample.output.text or ""), "baseline_output_retokenized"


def _detok(session: EngineSession) -> Detok:
    return session.engine.detokenize


def _timed_score(session: EngineSession, prompt: list[int], tokens: list[int]
                 ) -> tuple[TokenScores, tuple[float, int, str, int | None]]:
    t0 = time.perf_counter()
    with session.env():
        scores = session.engine.score(prompt, tokens, SCORE_K)
    seconds = time.perf_counter() - t0
    # llama.cpp keeps prompts: how many score calls so far restored one
    return scores, (seconds, len(tokens), scores.method, session.engine.prompts_restored)


def cannot_score(sessions: Mapping[str, EngineSession]) -> dict[str, str]:
    """Arms whose engine cannot score teacher-forced sequences, with the reason."""
    out = {}
    for arm, s in sessions.items():
        if s.described.capabilities.scoring in ("full", "top_k"):
            continue
        why = keys.why_not_scoring(s.described.effective_config)
        out[arm] = (f"engine {s.described.name!r} cannot score teacher-forced sequences"
                    + (f": {why}" if why else " (capabilities.scoring = None)"))
    return out


def scoring_preflight(arm: str, session: EngineSession) -> None:
    """Score a few tokens once, at load, on an engine that declares it can: a server
    that cannot after all (vLLM started with ``--max-logprobs`` below ``SCORE_K``, a
    llama-server too old for ``n_probs`` log-probs) is refused before any sample is
    generated, not after the whole run."""
    method = session.described.capabilities.scoring
    if method is None:
        return
    with session.env():
        ids = session.engine.tokenize("The answer is 4.")
        if len(ids) < 2:
            return
        try:
            session.engine.score(ids[:1], ids[1:4], SCORE_K)
        except (AbgateError, ValueError) as exc:
            raise UsageError(f"arm {arm!r}: its engine declares {method} scoring, but a "
                              f"test score at load failed: {exc} (fix the server, or run "
                              "without distribution agreement: --no-agreement)") from None


Shard = Mapping[str, EngineSession]  # every arm's session on one replica (or machine)


def agreement_pass(out: Path, doc: AbRecord, baseline: str,
                   sessions: Shard, prompt_of: Prompt,
                   max_tokens: int = 0, on_start: OnStart | None = None,
                   on_step: OnStep | None = None,
                   shards: Sequence[Shard] = ()) -> ScoredBy:
    """Score the baseline's outputs (their first ``max_tokens`` tokens; 0: all) with
    the baseline and every candidate in ``sessions``; append the rows; record the cost
    (or why not) in ``doc.scoring``. Progress: ``on_start`` once, ``on_step`` per
    baseline sample scored (its tokens times the arms that scored it). ``shards``: more
    places with every arm's session (a fleet's other replicas): the samples are spread
    over ``sessions`` and them (``ab.shards``), each scored by every arm on one, the rows
    written here in the samples' order. Returns how many samples each place scored
    (0: ``sessions``, then ``shards`` from 1) and the places lost meanwhile."""
    scoring = doc.scoring
    refused = cannot_score(sessions)
    if baseline in refused:
        for arm in sessions:
            scoring[arm] = ScoringCost(reason=refused[baseline])
        return ScoredBy()
    cands = [a for a in sessions if a != baseline and a not in refused]
    for arm in set(refused) - {baseline}:
        scoring[arm] = ScoringCost(reason=refused[arm])
    paths = {a: out / "arms" / a / AGREEMENT_FILE for a in cands}
    done = {a: {r.key for r in read_agreement(p, repair=True)} for a, p in paths.items()}
    samples = scorable(load_samples(out / "arms" / baseline / rec.SAMPLES_FILE))
    if on_start:
        on_start(sum(all(s.key in done[a] for a in cands) for s in samples), len(samples),
                 f"scoring {', '.join(cands)} against {baseline}")
    todo = {s.key: [a for a in cands if s.key not in done[a]] for s in samples}
    pending = [s for s in samples if todo[s.key]]

    def score(shard: Shard, sample: Sample) -> Scored | None:
        return _score(shard, sample, baseline, todo[sample.key], prompt_of, max_tokens)

    writers = {a: rec.SampleWriter(p) for a, p in paths.items()}
    places, per_place = Shards([sessions, *shards]), dict[int, int]()
    kept: dict[tuple[int, str], int] = {}  # (place, arm) -> its engine's prompts restored
    try:
        for _, scored, place in places.in_order(pending, score):
            if scored is None:
                continue
            per_place[place] = per_place.get(place, 0) + 1
            for arm, row in scored.rows.items():
                writers[arm].append(row)
            for arm, (seconds, n, method, restored) in scored.costs.items():
                cost = scoring.setdefault(arm, ScoringCost())
                cost.max_tokens_per_sequence = max_tokens or None
                cost.add(seconds, n, method)
                if restored is not None:
                    kept[place, arm] = restored
                    cost.prompts_restored = sum(v for (_, a), v in kept.items() if a == arm)
            if on_step:
                on_step(Step(scored.tokens * len(scored.costs)))
    finally:
        for w in writers.values():
            w.close()
    log.info("distribution agreement: %s", {a: scoring.get(a) for a in sessions})
    return ScoredBy(dict(sorted(per_place.items())), places.lost)


@dataclass(frozen=True)
class ScoredBy:
    """Where an agreement pass ran: samples scored per place, the places lost (index,
    why)."""

    per_place: dict[int, int] = field(default_factory=dict)
    lost: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Scored:
    """One baseline sample scored on one place: the candidates' rows, and per arm the
    cost (seconds, tokens, method, the engine's prompts restored so far)."""

    tokens: int
    rows: dict[str, AgreementRow]
    costs: dict[str, tuple[float, int, str, int | None]]


def _score(shard: Shard, sample: Sample, baseline: str, todo: list[str], prompt_of: Prompt,
           max_tokens: int) -> Scored | None:
    """Every arm of ``todo`` and the baseline score the baseline's output of ``sample`` on
    ``shard``; None when it has no tokens to score."""
    prompt, (tokens, source) = prompt_of(sample), continuation(sample, shard[baseline])
    tokens = tokens[:max_tokens] if max_tokens else tokens
    if not tokens:
        return None
    costs = {}
    base, costs[baseline] = _timed_score(shard[baseline], prompt, tokens)
    rows = {}
    for arm in todo:
        cand, costs[arm] = _timed_score(shard[arm], prompt, tokens)
        rows[arm] = agreement_row(sample, base, cand, _detok(shard[arm]), source)
    return Scored(len(tokens), rows, costs)


def probes_pass(out: Path, arm: str, session: EngineSession, probe_len: int) -> None:
    """Run the health probes on one arm into ``arms/<arm>/probes.json`` (once)."""
    path = out / "arms" / arm / PROBES_FILE
    if path.exists():
        return
    with session.env():
        try:
            probes = default_probes(session.engine.tokenize, needle_len=probe_len)
            results = run_probes(session.engine, probes, _n_ctx(session))
        except AbgateError as exc:  # e.g. the retrieval probe does not fit the context
            write_record(path, ProbesDocument.new(probes=[], error=str(exc)))
            return
    write_record(path, ProbesDocument.new(probes=results))


def _n_ctx(session: EngineSession) -> int | None:
    return keys.n_ctx(session.described.effective_config)


def prompt_from(session: EngineSession) -> Prompt:
    """The prompt token IDs of a baseline sample, rendered by the baseline engine and
    checked against the SHA the sample recorded (the prompts scored are those sent)."""
    def prompt(sample: Sample) -> list[int]:
        with session.env():
            ids = session.engine.render_prompt(sample.prompt.messages or [])
        recorded = sample.prompt.sha256
        if recorded and ids_sha256(ids) != recorded:
            raise AbgateError(f"scoring {sample.key}: the re-rendered prompt's SHA differs "
                              "from the one recorded with the sample")
        return ids
    return prompt
