"""``vllm bench serve`` results as abgate samples (speed only).

vLLM writes one JSON per benchmark (``--save-result``): the setup (``date``
``%Y%m%d-%H%M%S``, ``backend``, ``label``, ``model_id``, ``tokenizer_id``,
``num_prompts``, ``request_rate``, ``burstiness``, ``max_concurrency``), the aggregate
metrics (``mean_ttft_ms``, ...), and, with ``--save-detailed``, per-request arrays in
request order: ``input_lens``, ``output_lens``, ``ttfts`` (seconds), ``itls`` (a list of
inter-token gaps in seconds per request), ``latencies`` (seconds, newer vLLM),
``generated_texts`` and ``errors`` (empty string when the request succeeded).

Request ``i`` becomes sample ``req-<i>#0``: with the same dataset, seed and
``--num-prompts``, request ``i`` is the same prompt in two runs, and abgate refuses to
pair runs whose ``input_lens`` differ. Speed follows docs/metrics.md: TTFT; prefill
tok/s = input tokens / TTFT; steady decode tok/s = (output tokens - 1) / sum(ITLs);
TPOT ms = 1000 / steady decode; E2E = the latency (or TTFT + sum(ITLs)); output tok/s.
Without per-request data the file cannot be paired and is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.identity import digest_json, sha256_file
from abgate.ledger.entries import Entry, Unit, sample_metrics
from abgate.records.samples import Sample
from abgate.safejson import read_json
from abgate.scoring.extract import extract_integer
from abgate.scoring.health import sample_health

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls")


def _doc(path: Path) -> dict[str, Any]:
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a vllm bench serve result (not an object)")
    missing = [k for k in PER_REQUEST if not isinstance(doc.get(k), list)]
    if missing:
        raise UsageError(f"{path}: no per-request data ({', '.join(missing)} missing); "
                         "run vllm bench serve with --save-result --save-detailed")
    n = len(doc["ttfts"])
    if any(len(doc[k]) != n for k in PER_REQUEST):
        raise UsageError(f"{path}: per-request arrays of different lengths")
    _check_requests(path, doc)
    return doc


def _shown(value: Any) -> str:
    if isinstance(value, list | dict):
        return "a list" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_requests(path: Path, doc: Mapping[str, Any]) -> None:
    """The per-request values abgate reads have the types vLLM writes (a count an int,
    a request's ITLs a list, an error a string); anything else names the value."""
    checks: tuple[tuple[str, Any, str], ...] = (
        ("input_lens", _count, "a token count"), ("output_lens", _count, "a token count"),
        ("itls", lambda v: isinstance(v, list), "a list of inter-token gaps"),
        ("errors", lambda v: isinstance(v, str), "an error string"))
    for key, ok, what in checks:
        values = doc.get(key)
        for i, value in enumerate(values if isinstance(values, list) else []):
            if value is not None and not ok(value):
                raise UsageError(f"{path}: {key}[{i}] is {_shown(value)}, not {what}")


def _num(x: Any) -> float | None:
    """A finite number, else None (a string, NaN, inf, an int past a float: unmeasured)."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return None
    try:
        value = float(x)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def _timing(ttft: float | None, itls: Sequence[Any], n_in: int, n_out: int,
            latency: float | None) -> dict[str, float | None]:
    gaps = [g for g in (_num(x) for x in itls) if g is not None]
    decode = sum(gaps) if gaps else None
    steady = _ratio(float(n_out - 1), decode) if n_out >= 2 else None
    e2e = latency if latency is not None else (
        ttft + (decode or 0.0) if ttft is not None else None)
    return {"ttft_s": ttft, "prefill_tps": _ratio(float(n_in), ttft) if n_in else None,
            "decode_s": decode, "steady_decode_tps": steady,
            "tpot_ms": 1000.0 / steady if steady else None, "e2e_s": e2e,
            "output_tps": _ratio(float(n_out), e2e)}


def _at(doc: Mapping[str, Any], key: str, i: int) -> Any:
    values = doc.get(key)
    return values[i] if isinstance(values, list) and i < len(values) else None


def samples(path: Path) -> list[Sample]:
    doc = _doc(path)
    out = []
    for i in range(len(doc["ttfts"])):
        n_in, n_out = int(doc["input_lens"][i] or 0), int(doc["output_lens"][i] or 0)
        error = _at(doc, "errors", i) or None
        text = _at(doc, "generated_texts", i)
        text = text if isinstance(text, str) else ""
        reason = "error" if error else "unknown"
        timing = _timing(None if error else _num(doc["ttfts"][i]),
                         [] if error else (doc["itls"][i] or []), n_in, n_out,
                         None if error else _num(_at(doc, "latencies", i)))
        health = sample_health(text, None, n_out, reason, extract_integer(text), None)
        item = f"req-{i:05d}"
        out.append(Sample.model_validate({
            "key": f"{item}#0", "item_id": item, "seed": 0, "warmup": False,
            "prompt": {"tokens": n_in, "sha256": None},
            "output": {"text": text, "tokens": n_out, "token_ids": None},
            "finish_reason": reason, "error": error, "timing": timing,
            "reference": None, "extracted": None, "correct": None,
            "health": health,
        }))
    return out


def _started(doc: Mapping[str, Any], path: Path) -> float:
    date = doc.get("date")
    if isinstance(date, str):
        try:
            return datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()
        except ValueError:
            pass
    return path.stat().st_mtime


def _plain(value: Any) -> Any:
    """A setting as canonical JSON can hold it (a NaN or infinite rate as its text)."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else value


def entry(path: Path) -> Entry:
    doc = _doc(path)
    found = samples(path)
    setup = {k: _plain(doc.get(k)) for k in ("backend", "label", "model_id", "tokenizer_id",
                                             "request_rate", "burstiness", "max_concurrency")}
    unit = Unit(name=str(doc.get("label") or doc.get("backend") or "vllm"),
                engine=f"vllm-bench:{doc.get('backend')}", model=doc.get("model_id"),
                config_digest=digest_json(setup),
                workload_digest=digest_json({"num_prompts": doc.get("num_prompts"),
                                             "input_lens": doc["input_lens"]}),
                suite="vllm-bench", n=len(found), metrics=sample_metrics(found))
    return Entry(id=sha256_file(path), kind="vllm-bench", path=str(path.resolve()),
                 status="complete", started_at=_started(doc, path), units=[unit])
