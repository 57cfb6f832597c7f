"""A synthetic, analysed A/B directory for the report tests (no engine is run).

Three arms over 40 items x 2 seeds: ``base``; ``fast`` (10% faster decode, same
answers, a few token-different outputs: ACCEPT); ``loopy`` (faster, but 8 items fall
into long repetition loops that hit the token limit and one request errors: REJECT).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from abgate.ab.analyze import analyze
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.samples import Sample
from abgate.runner.documents import write_record
from abgate.runner.records import SampleWriter
from abgate.runner.summary import summarize

N_ITEMS, SEEDS = 40, (0, 1)
MODEL = {"path": "/models/tiny-test.gguf", "sha256": "ab" * 32, "size": 1234}
ARM_ARGS: dict[str, dict[str, Any]] = {
    "base": {"n_ctx": 1024},
    "fast": {"n_ctx": 1024, "flash_attn": True},
    "loopy": {"n_ctx": 1024, "type_k": "q4_0"},
}


def _noise(item: int, seed: int, salt: int) -> float:
    """Deterministic noise in [-1, 1]."""
    return math.sin(item * 12.9898 + seed * 78.233 + salt * 37.719)


def make_sample(arm: str, item: int, seed: int, *, warmup: bool = False) -> dict[str, Any]:
    item_id = f"item-{item:04d}"
    correct = item < 28
    tokens = 40 + (item * 7) % 30
    ids = [(item * 31 + seed + k) % 500 for k in range(tokens)]
    rep, finish, speedup = 0.05, "stop", 1.0
    if arm == "fast":
        speedup = 1.10
        if item % 10 == 3:  # a different path to the same answer
            ids = [i + 1 for i in ids]
    if arm == "loopy":
        speedup = 1.25
        if item < 8:
            correct, tokens, rep, finish = False, 256, 0.62, "length"
            ids = [k % 9 for k in range(tokens)]
    error = arm == "loopy" and item == 39 and seed == 1
    tps = 50.0 * speedup * (1.0 + 0.03 * _noise(item, seed, sum(map(ord, arm))))
    ttft = 0.2 * (1.0 + 0.05 * _noise(item, seed, 7))
    key = f"{item_id}#{seed}"
    return {
        "key": f"warmup:{key}" if warmup else key,
        "item_id": item_id,
        "seed": seed,
        "warmup": warmup,
        "finished_at": 1_800_000_000.0 + item,
        "prompt": {"messages": [{"role": "user", "content": f"question {item}"}],
                   "sha256": hashlib.sha256(item_id.encode()).hexdigest(), "tokens": 60},
        "output": {"text": "...", "token_ids": None if error else ids,
                   "tokens": 0 if error else tokens,
                   "sha256": None if error else hashlib.sha256(
                       ",".join(map(str, ids)).encode()).hexdigest()},
        "finish_reason": "error" if error else finish,
        "error": "engine crashed" if error else None,
        "timing": {
            "ttft_s": None if error else ttft,
            "prefill_tps": None if error else 60 / ttft,
            "decode_s": None if error else (tokens - 1) / tps,
            "steady_decode_tps": None if error else tps,
            "tpot_ms": None if error else 1000.0 / tps,
            "e2e_s": None if error else ttft + (tokens - 1) / tps,
            "output_tps": None if error else tokens / (ttft + (tokens - 1) / tps),
        },
        "reference": item,
        "correct": None if error else correct,
        "health": {
            "correct": None if error else correct, "invalid": False, "invalid_reason": None,
            "truncated": finish == "length" and not error, "natural_stop": finish == "stop",
            "error": error, "empty": False, "replacement_chars": 0, "control_chars": 0,
            "output_tokens": 0 if error else tokens, "seq_rep_4": 0.0 if error else rep,
            "seq_rep_4_words": 0.0 if error else rep,
        },
    }


def _config(arm: str) -> dict[str, Any]:
    return {"engine": "llamacpp", "model": MODEL["path"], "engine_args": ARM_ARGS[arm],
            "engine_options": {}, "env": {}, "suite": "synthetic", "data": None,
            "difficulty": "easy", "synthetic_seed": 0, "limit": N_ITEMS, "sample": None,
            "sample_seed": 0, "seeds": list(SEEDS), "max_tokens": 256, "temperature": 0.0,
            "top_p": 1.0, "top_k": 0, "shots": 0, "shots_file": None, "system": None}


def _spec(arm: str) -> dict[str, Any]:
    return {
        "engine": "llamacpp", "model": MODEL, "engine_args": ARM_ARGS[arm],
        "engine_options": {}, "resolved_engine_args": ARM_ARGS[arm], "env": {},
        "suite": {"name": "synthetic", "source": "synthetic:easy:seed=0",
                  "data_sha256": None, "n_available": 500},
        "selection": {"limit": N_ITEMS, "sample": None, "sample_seed": 0},
        "item_ids": [f"item-{i:04d}" for i in range(N_ITEMS)],
        "seeds": list(SEEDS),
        "sampling": {"max_tokens": 256, "temperature": 0.0, "top_p": 1.0, "top_k": 0},
        "prompt": {"version": "v1", "shots": 0, "shots_file": None, "system": None,
                   "instruction": "Solve: {question}"},
    }


def _effective(arm: str) -> dict[str, Any]:
    return {"n_ctx": 1024, "n_batch": 512, "n_threads": 2,
            "flash_attn": arm == "fast", "type_k": "q4_0" if arm == "loopy" else "f16",
            "type_v": "f16", "seed": 0}


def _ab_doc(arms: list[str]) -> dict[str, Any]:
    executed = [f"{arm}:item-{i:04d}#{s}" for i in range(N_ITEMS) for s in SEEDS for arm in arms]
    return {
        "schema_version": 1, "kind": "ab", "status": "complete", "abgate_version": "0.1.0",
        "experiment": {"name": "report-fixture", "description": "Flash attention and a q4 "
                       "KV cache against the f16 baseline.", "baseline": "base",
                       "arms": {arm: _config(arm) for arm in arms},
                       "schedule": {"mode": "auto", "warmup": 1, "block_size": 8},
                       "policy": None},
        "arm_spec_digests": {arm: f"{arm}-digest" for arm in arms}, "digest": "d" * 64,
        "git": {"commit": "c" * 40, "tree": "t" * 40, "dirty": False, "root": "/src"},
        "host": {"hostname": "testhost", "os": "Linux 6.1", "python": "3.11.7",
                 "cpu": "Test CPU", "cores_logical": 8, "cores_physical": 4, "affinity": 8,
                 "ram_bytes": 16 * 2**30, "gpus": []},
        "started_at": 1_800_000_000.0, "ended_at": 1_800_000_754.0,
        "schedule": {"mode": "interleave", "warmup": 1, "block_size": 8,
                     "executed": executed},
        "engines": {arm: {"name": "llamacpp", "version": "0.3.36", "model": MODEL["path"],
                          "effective_config": _effective(arm),
                          "capabilities": {"token_ids": True, "scoring": "full"}}
                    for arm in arms},
        "resumes": [], "error": None,
    }


def _arm_doc(ab: dict[str, Any], arm: str) -> dict[str, Any]:
    """An arm's run.json: the A/B's header (its host and times) and its spec. Its source
    tree is none (as an arm run outside a checkout records): the decide tests need arms
    whose tree differs from ab.json's."""
    header = {k: ab[k] for k in ("abgate_version", "host", "started_at", "ended_at",
                                 "error")} | {"git": None}
    return {"schema_version": 1, "kind": "ab-arm", "status": "complete", **header,
            "config": _config(arm), "spec": _spec(arm), "spec_digest": f"{arm}-digest",
            "engine": ab["engines"][arm], "resumes": [], "inputs": None, "n_samples": 80}


def build_ab_dir(out: Path) -> Path:
    """Write the A/B records through the real writers (each validated by its model, as
    ``abgate ab`` writes them), then analyse them (comparison.json) as ``abgate ab``
    does."""
    arms = list(ARM_ARGS)
    ab = _ab_doc(arms)
    out.mkdir(parents=True, exist_ok=True)
    write_record(out / "ab.json", AbRecord.model_validate(ab))
    for arm in arms:
        samples = [make_sample(arm, 0, 0, warmup=True)]
        samples += [make_sample(arm, i, s) for i in range(N_ITEMS) for s in SEEDS]
        arm_dir = out / "arms" / arm
        arm_dir.mkdir(parents=True)
        write_record(arm_dir / "run.json", RunRecord.model_validate(_arm_doc(ab, arm)))
        with SampleWriter(arm_dir / "samples.jsonl") as writer:
            for sample in samples:
                writer.append(Sample.model_validate(sample))
        write_record(arm_dir / "summary.json", summarize(samples, "complete"))
    analyze(out, n_boot=500)
    return out
