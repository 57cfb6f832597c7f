"""Run a prepared spec against a resident engine, crash-safely.

The runner owns timing, records and resume: samples are appended and fsynced as
they finish; ``run.json`` says ``running`` until the run ends ``complete``,
``failed`` (engine or harness error) or ``interrupted`` (Ctrl-C / SIGTERM). A run
killed outright stays ``running`` and ``--resume`` finishes it.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from abgate.engines.base import Engine, GenerationRequest, GenerationResult, SamplingParams
from abgate.errors import AbgateError, UsageError
from abgate.host import git_state, host_info
from abgate.runner import records as rec
from abgate.runner.samples import build_sample, sample_key
from abgate.runner.spec import PreparedRun, abgate_version
from abgate.suites import Item
from abgate.runner.summary import summarize

log = logging.getLogger("abgate.run")
OnSample = Callable[[dict[str, Any]], None]


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a run."""


@dataclass(frozen=True)
class RunOutcome:
    out_dir: Path
    status: str
    n_done: int
    n_total: int
    summary: dict[str, Any]


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _run_log(out: Path) -> Iterator[None]:
    handler = logging.FileHandler(out / rec.LOG_FILE, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("abgate")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


def open_run_dir(p: PreparedRun, out: Path, resume: bool, force: bool) -> dict[str, Any]:
    """Create or reopen the run directory; returns the ``run.json`` document to update."""
    if resume:
        if not (out / rec.RUN_FILE).exists():
            raise UsageError(f"--resume {out}: no run.json there; nothing to resume")
        doc = rec.read_json(out / rec.RUN_FILE)
        if doc.get("spec_digest") != p.spec_digest:
            diffs = list(rec.iter_diff(doc.get("spec"), p.spec))[:8]
            raise UsageError(f"--resume {out}: the run spec differs from the recorded one "
                             f"(at {', '.join(diffs) or 'spec'}); use a new directory")
        doc.setdefault("resumes", []).append({"at": time.time(), "from_status": doc["status"]})
        return doc
    rec.prepare_new_dir(out, force)
    return {
        "schema_version": rec.SCHEMA_VERSION,
        "kind": "run",
        "status": "running",
        "abgate_version": abgate_version(),
        "config": p.config.to_dict(),
        "spec": p.spec,
        "spec_digest": p.spec_digest,
        "git": git_state(),
        "host": host_info(),
        "started_at": time.time(),
        "ended_at": None,
        "error": None,
        "resumes": [],
    }


def request_for(p: PreparedRun, item_id: str, seed: int,
                messages: tuple[dict[str, str], ...]) -> GenerationRequest:
    c = p.config
    params = SamplingParams(max_tokens=c.max_tokens, temperature=c.temperature, top_p=c.top_p,
                            top_k=c.top_k, seed=seed)
    return GenerationRequest(id=sample_key(item_id, seed), params=params, messages=messages)


def run_samples(p: PreparedRun, engine: Engine, out: Path, done: set[str],
                on_sample: OnSample | None = None) -> int:
    """Generate every pending (item, seed), appending each sample as it finishes."""
    pending: dict[str, tuple[Item, int, tuple[dict[str, str], ...]]] = {}
    for item, seed in p.keys():
        key = sample_key(item.id, seed)
        if key not in done:
            pending[key] = (item, seed, p.messages(item))
    requests = [request_for(p, item.id, seed, msgs) for item, seed, msgs in pending.values()]
    with rec.SampleWriter(out / rec.SAMPLES_FILE) as writer:

        def record(result: GenerationResult) -> None:
            item, seed, messages = pending[result.request_id]
            sample = build_sample(item, seed, messages, result)
            writer.append(sample)
            done.add(sample["key"])
            if result.finish_reason == "error":
                log.warning("sample %s: engine error: %s", sample["key"], result.error)
            if on_sample:
                on_sample(sample)

        engine.generate(requests, on_result=record)
    return len(requests)


def execute(p: PreparedRun, out: Path, *, resume: bool = False, force: bool = False,
            on_start: Callable[[int, int], None] | None = None,
            on_sample: OnSample | None = None) -> RunOutcome:
    doc = open_run_dir(p, out, resume, force)
    samples_path = out / rec.SAMPLES_FILE
    existing = rec.read_samples(samples_path, repair=True)
    done = {s["key"] for s in existing}
    total = len(p.keys())
    with _run_log(out), _sigterm_interrupts():
        doc["status"] = "running"
        rec.write_json_atomic(out / rec.RUN_FILE, doc)
        log.info("run %s: %d/%d samples already done", out, len(done), total)
        engine: Engine | None = None
        try:
            os.environ.update(p.config.env)
            engine = p.engine.load(p.model, p.resolved_args, p.config.engine_options or None,
                                   out)
            doc["engine"] = engine.describe().to_dict()
            rec.write_json_atomic(out / rec.RUN_FILE, doc)
            if on_start:
                on_start(len(done), total)
            run_samples(p, engine, out, done, on_sample)
            doc["status"] = "complete"
        except (KeyboardInterrupt, Interrupted):
            doc["status"], doc["error"] = "interrupted", "interrupted by the user"
        except AbgateError as exc:
            doc["status"], doc["error"] = "failed", str(exc)
            raise
        except Exception as exc:
            doc["status"], doc["error"] = "failed", f"{type(exc).__name__}: {exc}"
            log.exception("run failed")
            raise AbgateError(f"run failed: {doc['error']} (records kept in {out})") from exc
        finally:
            if engine is not None:
                engine.close()
                doc["cleanup"] = getattr(engine, "cleanup_evidence", None)
            doc["ended_at"] = time.time()
            samples = rec.read_samples(samples_path)
            summary = summarize(samples)
            summary["status"] = doc["status"]
            rec.write_json_atomic(out / rec.SUMMARY_FILE, summary)
            doc["n_samples"] = len(samples)
            rec.write_json_atomic(out / rec.RUN_FILE, doc)
            log.info("run %s ended %s with %d/%d samples", out, doc["status"], len(samples),
                     total)
    return RunOutcome(out, doc["status"], len(done), total, summary)
