"""Results made by other tools, read into abgate samples and ledger entries:

- :mod:`.lmeval`: lm-evaluation-harness ``--log_samples`` JSONL (``samples_<task>_<date>.jsonl``),
  re-scored with abgate's GSM8K extractor, lm-eval's own stored metrics kept beside;
- :mod:`.vllm_bench`: a ``vllm bench serve --save-result --save-detailed`` JSON, whose
  per-request ``ttfts`` / ``itls`` / ``output_lens`` give abgate's speed metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.ledger.entries import Entry
from abgate.ledger.imports import lmeval, vllm_bench
from abgate.records.samples import Sample
from abgate.safejson import BadJson, parse, read_text


def detect(path: Path) -> str:
    """``lm-eval`` or ``vllm-bench``, from the file's content."""
    try:
        if path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as fh:
                head = fh.readline()
        else:
            head = read_text(path)
        doc: Any = parse(head)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not an lm-eval samples JSONL or vLLM bench JSON "
                         f"({exc})") from None
    except BadJson as exc:
        raise UsageError(f"{exc.at(str(path))} (not an lm-eval samples JSONL or vLLM bench "
                         "JSON)") from None
    if isinstance(doc, dict) and "doc_id" in doc and "resps" in doc:
        return "lm-eval"
    if isinstance(doc, dict) and "ttfts" in doc or isinstance(doc, dict) and "backend" in doc \
            and "completed" in doc:
        return "vllm-bench"
    raise UsageError(f"{path}: not an lm-eval samples JSONL (doc_id, resps) or a vllm bench "
                     "serve result (backend, completed, ttfts)")


def read_import(path: Path) -> Entry:
    kind = detect(path)
    return lmeval.entry(path) if kind == "lm-eval" else vllm_bench.entry(path)


def import_samples(path: Path) -> list[Sample]:
    """An imported file's records as abgate samples (for ``abgate compare``)."""
    kind = detect(path)
    return lmeval.samples(path) if kind == "lm-eval" else vllm_bench.samples(path)
