"""lm-evaluation-harness ``--log_samples`` files as abgate samples.

Each line of ``samples_<task>_<date>.jsonl`` is one (document, filter): ``doc_id``,
``doc`` (for GSM8K: ``question``, ``answer`` ending in ``#### N``), ``arguments``
(``gen_args_0.arg_0`` the prompt, ``arg_1`` the generation kwargs), ``resps`` (the raw
generations), ``filtered_resps``, ``filter``, the ``doc_hash`` / ``prompt_hash`` /
``target_hash`` and the task's metrics by name (e.g. ``exact_match``). lm-eval writes a
document once per filter (GSM8K: ``strict-match`` and ``flexible-extract``) with the
same raw response.

A document becomes one sample keyed ``<task>-<doc_id>#0``: the raw response re-scored
by :func:`abgate.scoring.extract.extract_integer` against the ``####`` reference
(``correct``, ``health``), and lm-eval's own score per filter kept under ``lm_eval``.
lm-eval records neither token counts, finish reasons nor timings, so ``output.tokens``
counts words, ``finish_reason`` is ``"unknown"`` and every speed field is ``None``.
The sibling ``results_<date>.json`` (when present) gives the model and its arguments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from abgate.compare.stats import clustered_mean
from abgate.errors import UsageError
from abgate.identity import digest_json, sha256_file
from abgate.jsonl import json_objects
from abgate.ledger.entries import Entry, Unit, metric, sample_metrics
from abgate.records.samples import Sample, SampleExtraction
from abgate.safejson import read_json
from abgate.scoring.extract import extract_integer, reference_answer
from abgate.scoring.health import sample_health

_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d.-]+)\.jsonl$")
_TIMING = {"ttft_s": None, "prefill_tps": None, "decode_s": None, "steady_decode_tps": None,
           "tpot_ms": None, "e2e_s": None, "output_tps": None}


# The fields abgate reads and the JSON types lm-eval writes them as.
_TYPES: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    ("doc_id", (int, str), "an integer or a string"), ("resps", list, "a list"),
    ("doc", dict, "an object"), ("arguments", dict, "an object"),
    ("filtered_resps", list, "a list"), ("metrics", list, "a list"),
    ("filter", str, "a string"))


def _kind(value: Any) -> str:
    return {list: "a list", dict: "an object", str: "a string", bool: "a boolean",
            float: "a number", int: "an integer"}.get(type(value), type(value).__name__)


def _check_line(path: Path, n: int, doc: Mapping[str, Any]) -> None:
    if "doc_id" not in doc or "resps" not in doc:
        raise UsageError(f"{path}:{n}: not an lm-eval sample (no doc_id / resps)")
    for key, types, what in _TYPES:
        value = doc.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise UsageError(f"{path}:{n}: {key} is {_kind(value)}, not {what}")
    args = (doc.get("arguments") or {}).get("gen_args_0")
    if args is not None and not isinstance(args, dict):
        raise UsageError(f"{path}:{n}: arguments.gen_args_0 is {_kind(args)}, not an object")


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for n, doc in json_objects(path):
        _check_line(path, n, doc)
        out.append(doc)
    if not out:
        raise UsageError(f"{path}: no lm-eval samples")
    return out


def task_name(path: Path) -> str:
    m = _NAME.match(path.name)
    return m.group("task") if m else path.stem


def results_doc(path: Path) -> dict[str, Any]:
    """The ``results_<date>.json`` written beside the samples file, or ``{}``."""
    m = _NAME.match(path.name)
    if m is None:
        return {}
    results = path.with_name(f"results_{m.group('date')}.json")
    try:
        doc = read_json(results)
    except UsageError:  # none, or unreadable: the samples alone
        return {}
    return doc if isinstance(doc, dict) else {}


def _response(line: Mapping[str, Any]) -> str:
    resps = line.get("resps")
    first = resps[0] if isinstance(resps, list) and resps else ""
    text = first[0] if isinstance(first, list) and first else first
    return text if isinstance(text, str) else ""


def _reference(doc: Any) -> int | None:
    answer = doc.get("answer") if isinstance(doc, Mapping) else None
    if not isinstance(answer, str):
        return None
    try:
        return reference_answer(answer)
    except ValueError:
        return None


def _metric_names(line: Mapping[str, Any]) -> list[str]:
    names = line.get("metrics")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def samples(path: Path) -> list[Sample]:
    """One abgate sample per lm-eval document, in ``doc_id`` order."""
    task = task_name(path)
    by_doc: dict[Any, dict[str, Any]] = {}
    for line in _lines(path):
        doc_id = line["doc_id"]
        sample = by_doc.get(doc_id)
        if sample is None:
            text = _response(line)
            reference = _reference(line.get("doc"))
            extraction = extract_integer(text)
            health = sample_health(text, None, len(text.split()), "unknown", extraction,
                                   reference)
            args = (line.get("arguments") or {}).get("gen_args_0") or {}
            item = f"{task}-{doc_id}"
            sample = {
                "key": f"{item}#0", "item_id": item, "seed": 0, "warmup": False,
                "prompt": {"text": args.get("arg_0"), "sha256": line.get("prompt_hash")},
                "output": {"text": text, "tokens": len(text.split()), "token_ids": None},
                "finish_reason": "unknown", "error": None, "timing": dict(_TIMING),
                "reference": reference,
                "extracted": SampleExtraction(value=extraction.value, source=extraction.source,
                                              reason=extraction.reason, span=extraction.span),
                "correct": health.correct, "health": health,
                "lm_eval": {"doc_hash": line.get("doc_hash"),
                            "target_hash": line.get("target_hash"),
                            "gen_kwargs": args.get("arg_1"), "metrics": {}},
            }
            by_doc[doc_id] = sample
        elif _response(line) != sample["output"]["text"]:
            raise UsageError(f"{path}: doc_id {doc_id} has different responses under "
                             "different filters")
        scores = {name: line.get(name) for name in _metric_names(line)}
        scores["filtered_resp"] = (line.get("filtered_resps") or [None])[0]
        sample["lm_eval"]["metrics"][str(line.get("filter") or "none")] = scores
    return [Sample.model_validate(by_doc[k])
            for k in sorted(by_doc, key=lambda d: (str(type(d)), d))]


def _lm_eval(sample: Sample) -> dict[str, Any]:
    """What the import keeps of lm-eval's own (``lm_eval``: hashes, gen kwargs, metrics)."""
    found: dict[str, Any] = (sample.model_extra or {})["lm_eval"]
    return found


def _lm_eval_metrics(found: list[Sample]) -> dict[str, dict[str, Any]]:
    """lm-eval's own stored scores, ``lm_eval:<metric>,<filter>``, mean and SE over docs."""
    values: dict[str, list[tuple[float, str]]] = {}
    for s in found:
        for flt, scores in _lm_eval(s)["metrics"].items():
            for name, value in scores.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    values.setdefault(f"lm_eval:{name},{flt}", []).append(
                        (float(value), str(s.item_id)))
    out = {}
    for name, pairs in sorted(values.items()):
        mean, se = clustered_mean([v for v, _ in pairs], [i for _, i in pairs])
        out[name] = metric(mean, None if math.isnan(se) else se, len(pairs))
    return out


def _started(path: Path, results: Mapping[str, Any]) -> float:
    date = results.get("date")
    if isinstance(date, int | float):
        return float(date)
    m = _NAME.match(path.name)
    if m:
        try:
            return datetime.strptime(m.group("date"), "%Y-%m-%dT%H-%M-%S.%f").timestamp()
        except ValueError:
            pass
    return path.stat().st_mtime


def entry(path: Path) -> Entry:
    found = samples(path)
    results = results_doc(path)
    raw_config = results.get("config")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
    model_args = config.get("model_args")
    model = results.get("model_name") or (model_args.get("model")
                                          if isinstance(model_args, dict) else None)
    gen_kwargs = _lm_eval(found[0])["gen_kwargs"]
    unit = Unit(
        name=task_name(path), engine=f"lm-eval:{config.get('model') or 'unknown'}",
        engine_version=results.get("lm_eval_version"), model=model,
        config_digest=digest_json({"model": config.get("model"), "model_args": model_args,
                                   "gen_kwargs": gen_kwargs}),
        workload_digest=digest_json(sorted(str(_lm_eval(s)["doc_hash"]) for s in found)),
        suite=task_name(path), n=len(found),
        metrics={**sample_metrics(found), **_lm_eval_metrics(found)})
    git = results.get("git_hash")
    return Entry(id=sha256_file(path), kind="lm-eval", path=str(path.resolve()),
                 status="complete", started_at=_started(path, results),
                 git_commit=git if isinstance(git, str) else None,
                 abgate_version=None, units=[unit])
