"""A run that is recorded finished: its samples checked like any resume's, and the
part of its finishing a signal (or a kill) may have cut short, completed."""

from __future__ import annotations

from pathlib import Path

from abgate.errors import AbgateError, UsageError
from abgate.records.documents import RunRecord
from abgate.records.samples import Sample, sample_key
from abgate.runner import records as rec
from abgate.runner.documents import read_document, read_record, write_record
from abgate.runner.samples import checked_samples
from abgate.runner.spec import PreparedRun
from abgate.runner.summary import Summary, summarize


def checked_complete(out: Path, p: PreparedRun, require_all: bool = True
                     ) -> list[Sample]:
    """The samples of the complete run in ``out``, every line checked against ``p``'s
    (item, seed) keys as a resume checks them; as nothing was being written when it
    completed, a damaged last line is refused too (not taken for a torn write), and
    (``require_all``; not for an A/B arm, which a sequential A/B ends early) a sample
    missing makes it not complete. Each is a UsageError naming file:line."""
    path = out / rec.SAMPLES_FILE
    lines = rec.read_sample_lines(path)
    raw = path.read_bytes().split(b"\n") if path.exists() else []
    written = [i + 1 for i, line in enumerate(raw) if line.strip()]
    if len(written) > len(lines):
        n = written[len(lines)]
        raise UsageError(f"{path}:{n}: corrupt sample line (the run is recorded complete, so "
                         "no write was cut short there: the file was damaged or edited)")
    pairs = p.keys()  # PreparedRun.keys(): the (item, seed) pairs, not a dict
    keys = {sample_key(i.id, s) for i, s in pairs}
    samples = checked_samples(path, lines, keys)
    missing = keys - {str(s.key) for s in samples if not s.warmup}
    if missing and require_all:
        raise UsageError(f"{path}: the run is recorded complete but {len(missing)} of its "
                         f"{len(keys)} samples are missing (e.g. {sorted(missing)[0]!r}): the "
                         "file was damaged or edited (--force runs it again)")
    return samples


def finish_run(out: Path) -> list[str]:
    """``summary.json`` of a finished run, written again from its samples when it is
    missing or unreadable (a kill between the samples and the summary); returns the
    names written. A run still ``running`` is not finished (``--resume`` runs it)."""
    doc = read_record(out / rec.RUN_FILE)
    if not isinstance(doc, RunRecord) or doc.kind != "run" or doc.status == "running":
        return []  # a bench's or an A/B arm's run.json, or a run not finished
    try:
        read_document(out / rec.SUMMARY_FILE, Summary)
        return []
    except AbgateError:
        pass
    samples = [s for _, s in rec.read_sample_lines(out / rec.SAMPLES_FILE)]
    write_record(out / rec.SUMMARY_FILE, summarize(samples, str(doc.status)))
    return [rec.SUMMARY_FILE]
