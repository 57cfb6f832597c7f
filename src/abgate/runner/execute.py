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

from abgate import signals
from abgate.engines.base import GenerationRequest, GenerationResult, SamplingParams
from abgate.errors import AbgateError, UsageError, one_line
from abgate.provenance import ContractOutcome
from abgate.records.documents import AnyRecord, Kind, RecordHeader, RunRecord
from abgate.records.samples import Sample, sample_key
from abgate.records.sections import GitState
from abgate.redact import env_secrets, redact_text
from abgate.runner import records as rec
from abgate.runner.documents import new_spec_record, read_record, source_state, write_record
from abgate.runner.outdir import claimed, prepare_new_dir
from abgate.runner.provenance import (
    ProvenanceOptions,
    check_before_load,
    input_hashes,
    record_after_load,
)
from abgate.runner.resume import resumed
from abgate.runner.samples import build_sample, checked_samples
from abgate.runner.session import loaded
from abgate.runner.spec import PreparedRun
from abgate.runner.summary import Summary, summarize
from abgate.safefs import LogFile
from abgate.signals import Interrupted
from abgate.suites import Item

log = logging.getLogger("abgate.run")
OnSample = Callable[[Sample], None]  # a finished sample, as written


_PENDING: list[int] = []  # signals received during a tracked run, not yet acted on
_FINISHING: list[int] = []  # while a tracked run writes its final records: _PENDING's length then


@dataclass(frozen=True)
class RunOutcome:
    out_dir: Path
    status: str
    n_done: int
    n_total: int
    summary: Summary | None  # None: the run ended before its summary was written


@contextmanager
def _interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM interrupt a run between samples: the first one is noted, the
    request in flight finishes and is recorded, and the next :func:`check_interrupted`
    raises :class:`Interrupted`; a second signal raises at once. The handler does not
    raise on the first signal because Python may run it inside a ctypes callback
    (llama.cpp's log callback), where an exception is printed and dropped, and the
    run would go on as if nothing had been asked."""
    def handler(signum: int, frame: FrameType | None) -> None:
        _PENDING.append(signum)
        signals.note(signum)
        if _FINISHING and len(_PENDING) - _FINISHING[-1] < 2:
            # The final records are being written: an exception now would tear them (a
            # second signal in this phase still stops at once, e.g. a hung shutdown).
            log.warning("signal %d: writing the final records first (again to stop now)",
                        signum)
            return
        if len(_PENDING) > 1:
            raise Interrupted(f"signal {signum}")
        log.warning("signal %d: stopping after the request in flight (again to stop now)",
                    signum)

    _PENDING.clear()
    # A signal ignored when abgate started (SIGINT of a background job, nohup) stays so.
    wanted = [s for s in (signal.SIGINT, signal.SIGTERM)
              if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, handler) for s in wanted}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _PENDING.clear()
        _FINISHING.clear()


def check_interrupted() -> None:
    """Raise :class:`Interrupted` if a signal came since the tracked run began (called
    by the run loops between samples)."""
    if _PENDING:
        raise Interrupted(f"signal {_PENDING[0]}")


class RedactingFormatter(logging.Formatter):
    """``run.log`` lines through :func:`abgate.redact.redact_text`, with the values of
    secret-named variables set at the time (``--env`` overrides included)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record), env_secrets(os.environ))


@contextmanager
def _run_log(out: Path) -> Iterator[None]:
    handler = LogFile(out / rec.LOG_FILE)  # never through a link
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("abgate")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


_RESUMABLE = {"run.json": "a run", "ab.json": "an A/B"}  # marker -> what it marks


def read_resumable(out: Path, marker: str, *kinds: Kind) -> AnyRecord:
    """The record of a directory given to ``--resume``, read before anything else is
    (data, models, engines): a path that is not such a directory is a one-line
    UsageError saying so, naming the command that would resume it if it is another's."""
    what = _RESUMABLE.get(marker, marker)
    if not out.is_dir():
        raise UsageError(f"--resume {out}: " + ("not a directory" if out.exists() else
                                                "no such directory") + "; nothing to resume")
    if not (out / marker).is_file():
        other = next((f"; it holds {m}: {w} (abgate {'ab' if m == 'ab.json' else 'run'} "
                      f"--resume {out})" for m, w in _RESUMABLE.items()
                      if m != marker and (out / m).is_file()), "")
        raise UsageError(f"--resume {out}: not {what} directory (no {marker}){other}; "
                         "nothing to resume")
    return read_record(out / marker, *kinds)


def kept_status(previous: str | None, status: str) -> str:
    """The status a record ends with: a record that was already ``complete`` when it
    was reopened stays complete whatever befell the reopening (an interrupt, a failed
    reload): its samples are all there."""
    return "complete" if previous == "complete" else status


def end_record(doc: RecordHeader, out: Path, previous: str | None, status: str,
               error: str | None, logger: logging.Logger = log) -> None:
    """Set ``doc``'s final status, error and end time; a record that was ``complete``
    when it was reopened stays so (:func:`kept_status`), with a warning to ``logger``."""
    if kept_status(previous, status) != status:
        logger.warning("%s was complete before this resume, and stays so (this resume "
                       "ended %s)", out, status)
        status, error = "complete", doc.error
    doc.status, doc.error = status, error  # type: ignore[assignment]
    doc.ended_at = time.time()


def open_run_dir(p: PreparedRun, out: Path, resume: bool, force: bool,
                 git: GitState | None,
                 inputs: dict[str, str | None] | None = None,
                 allow_source_change: bool = False) -> RunRecord:
    """Create or reopen the run directory; returns the ``run.json`` document to update.
    ``git`` (the source state) and ``inputs`` (contract and manifest hashes) are this
    start's, recorded with it and, on a resume, compared with the first start's."""
    if resume:
        doc = read_record(out / rec.RUN_FILE, "run", "ab-arm", model=RunRecord)
        if doc.spec_digest != p.spec_digest:
            diffs = list(rec.iter_diff(doc.digested_spec(), p.spec))[:8]
            raise UsageError(f"--resume {out}: the run spec differs from the recorded one "
                             f"(at {', '.join(diffs) or 'spec'}); use a new directory")
        resumed(doc, out, git, inputs, allow_source_change)
        return doc
    prepare_new_dir(out, force)
    made = new_spec_record("run", p, git=git, resumes=[], inputs=inputs)
    assert isinstance(made, RunRecord)
    return made


def request_for(p: PreparedRun, item_id: str, seed: int,
                messages: tuple[dict[str, str], ...]) -> GenerationRequest:
    c = p.config
    params = SamplingParams(max_tokens=c.max_tokens, temperature=c.temperature, top_p=c.top_p,
                            top_k=c.top_k, seed=seed)
    return GenerationRequest(id=sample_key(item_id, seed), params=params, messages=messages)


class RunRecorder:
    """One run directory, open for appending: the run document, the sample writer and
    the set of finished keys. ``abgate run`` uses one; ``abgate ab`` one per arm."""

    def __init__(self, p: PreparedRun, out: Path, *, resume: bool, force: bool,
                 git: GitState | None, kind: Kind = "run",
                 inputs: dict[str, str | None] | None = None,
                 allow_source_change: bool = False) -> None:
        self.p, self.out = p, out
        self.doc = open_run_dir(p, out, resume, force, git, inputs, allow_source_change)
        self.previous = self.doc.status if resume else None
        self.doc.kind = kind
        self.samples_path = out / rec.SAMPLES_FILE
        self.done = {str(s.key) for s in self.samples(repair=True)}
        self.total = len(p.keys())
        self.doc.status = "running"
        self.save()
        self._writer = rec.SampleWriter(self.samples_path)

    def save(self) -> None:
        write_record(self.out / rec.RUN_FILE, self.doc)

    def samples(self, repair: bool = False) -> list[Sample]:
        """The samples so far, every line checked against this run's keys."""
        pairs = self.p.keys()  # the (item, seed) pairs, not a dict
        keys = {sample_key(i.id, s) for i, s in pairs}
        return checked_samples(self.samples_path,
                               rec.read_sample_lines(self.samples_path, repair), keys)

    def pending(self) -> list[tuple[Item, int]]:
        keys = self.p.keys()  # PreparedRun.keys(): the (item, seed) pairs, not a dict
        return [(i, s) for i, s in keys if sample_key(i.id, s) not in self.done]

    def request(self, item: Item, seed: int) -> GenerationRequest:
        return request_for(self.p, item.id, seed, self.p.messages(item))

    def record(self, item: Item, seed: int, result: GenerationResult,
               warmup: bool = False) -> Sample:
        """Write the sample of one finished request (appended and fsynced) and return
        it as the model written."""
        sample = build_sample(item, seed, self.p.messages(item), result, warmup=warmup)
        self._writer.append(sample)
        check_interrupted()
        self.done.add(str(sample.key))
        if result.finish_reason == "error":
            log.warning("%s sample %s: engine error: %s", self.out.name, sample.key,
                        result.error)
        return sample

    def finish(self, status: str, error: str | None = None) -> Summary:
        self._writer.close()
        end_record(self.doc, self.out, self.previous, status, error)
        status = self.doc.status or status  # a complete record reopened stays complete
        samples = self.samples()
        summary = summarize(samples, status)
        write_record(self.out / rec.SUMMARY_FILE, summary)
        self.doc.n_samples = summary.n
        self.save()
        log.info("run %s ended %s with %d/%d samples", self.out, status,
                 self.doc.n_samples, self.total)
        return summary


def fail_if_all_errors(what: str, samples: list[Sample]) -> None:
    """A run (an A/B arm) in which every measured sample is an engine error measured
    nothing: it fails (exit 1) with the first error, instead of ending ``complete``."""
    measured = [s for s in samples if not s.warmup]
    errors = [s for s in measured if s.finish_reason == "error"]
    if measured and len(errors) == len(measured):
        raise AbgateError(f"{what}: every sample ({len(measured)}) is an engine error; the "
                          f"first: {one_line(errors[0].error)}")


@dataclass
class Status:
    """How a run or A/B ended: ``complete``, ``failed`` or ``interrupted``."""

    value: str = "failed"
    error: str | None = None


@contextmanager
def tracked(out: Path, what: str, finish: Callable[[Status], None],
            resumable: bool = True) -> Iterator[Status]:
    """The bookkeeping ``abgate run`` and ``abgate ab`` share: the run log, SIGTERM as an
    interruption, the final status, and ``finish`` (close engines, write records) on
    every way out. Unexpected errors become one-line AbgateErrors; records are kept. A
    signal while ``finish`` wrote a complete record stops the command after it
    (``signals.Stopped``, naming ``out`` for ``--resume`` when ``resumable``)."""
    status = Status()
    with _run_log(out), _interrupts():
        try:
            yield status
            status.value = "complete"
        except (KeyboardInterrupt, Interrupted):
            status.value, status.error = "interrupted", "interrupted by the user"
        except AbgateError as exc:
            status.error = str(exc)
            raise
        except Exception as exc:
            status.error = f"{type(exc).__name__}: {exc}"
            log.exception("%s failed", what)
            raise AbgateError(f"{what} failed: {status.error} (records kept in {out})"
                              ) from exc
        finally:
            log.info("%s %s ended %s%s", what, out, status.value,
                     f": {status.error}" if status.error else "")
            _finish(finish, status, out, what)
        late = _PENDING[_FINISHING[-1]] if _FINISHING and len(_PENDING) > _FINISHING[-1] \
            else None
    if late is not None and status.value == "complete":
        # A signal while the final records were written: they are whole (and complete);
        # the rest (verdict, reports, ledger entry) is left to --resume.
        raise signals.Stopped(late, out=out if resumable else None)


def _finish(finish: Callable[[Status], None], status: Status, out: Path, what: str) -> None:
    """``finish``, whose own failure (a full disk, a directory gone read-only) is one
    line that keeps the first error, not a traceback that hides it. A Ctrl-C or SIGTERM
    while it runs is noted, not raised (the records are written whole)."""
    _FINISHING.append(len(_PENDING))
    try:
        signals.pause_point("records")  # tests: a signal while the final records are written
        finish(status)
    except Exception as exc:
        log.exception("%s %s: finalising the records failed", what, out)
        first = f" ({status.error})" if status.error else ""
        cause = str(exc) if isinstance(exc, AbgateError) else f"{type(exc).__name__}: {exc}"
        raise AbgateError(f"{what} {status.value}{first}; then its records could not be "
                          f"finalised: {cause}; the samples already written are kept in "
                          f"{out} (--resume finishes it)") from exc


def execute(p: PreparedRun, out: Path, *, resume: bool = False, force: bool = False,
            on_start: Callable[[int, int], None] | None = None,
            on_sample: OnSample | None = None,
            provenance: ProvenanceOptions | None = None) -> RunOutcome:
    prov = provenance or ProvenanceOptions()
    contract = check_before_load(prov, p.engine)
    with claimed(out, resume=resume, force=force, marker=rec.RUN_FILE):
        return _execute(p, out, resume, force, on_start, on_sample, prov, contract)


def _execute(p: PreparedRun, out: Path, resume: bool, force: bool,
             on_start: Callable[[int, int], None] | None, on_sample: OnSample | None,
             prov: ProvenanceOptions, contract: ContractOutcome | None) -> RunOutcome:
    run = RunRecorder(p, out, resume=resume, force=force, git=source_state(out),
                      inputs=input_hashes(prov), allow_source_change=prov.allow_source_change)
    summary: list[Summary] = []

    def finish(status: Status) -> None:
        summary.append(run.finish(status.value, status.error))

    with tracked(out, "run", finish) as status:
        log.info("run %s: %d/%d samples already done", out, len(run.done), run.total)
        with loaded(p.engine, out, run.doc) as session:
            try:
                record_after_load(prov, contract, session, run.doc)
            finally:
                run.save()
            if on_start:
                on_start(len(run.done), run.total)
            pending = {sample_key(i.id, s): (i, s) for i, s in run.pending()}

            def record(result: GenerationResult) -> None:
                sample = run.record(*pending[result.request_id], result)
                if on_sample:
                    on_sample(sample)

            with session.env():
                session.engine.generate([run.request(i, s) for i, s in pending.values()],
                                        on_result=record)
        fail_if_all_errors(f"run {out}", run.samples())
    return RunOutcome(out, status.value, len(run.done), run.total,
                      summary[-1] if summary else None)
