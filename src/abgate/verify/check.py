"""``abgate verify DIR [--allowed-signers FILE]``: a run, bench, baseline or A/B
directory (its arms and decisions included) checked as it is on disk.

- Each record document (``run.json``, ``ab.json``, ``baseline.json``, anywhere below
  ``DIR``) is read through its model; ``baseline.json``'s seal is verified over its
  bytes first (``integrity.verify_file``). Each ``samples.jsonl`` and
  ``agreement.jsonl`` must be whole JSON lines, each ``decisions.jsonl`` line a decision
  record.
- With ``--allowed-signers``, the signature (``signing.py``) must verify and name a
  signer, and every file's SHA-256 must match the signed list (none changed, missing or
  added since signing). Without it the signature is not checked, and a record other
  than a baseline has nothing that vouches for its bytes: that is said, not passed over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from abgate.errors import AbgateError, UsageError
from abgate.integrity import verify_file
from abgate.records.side_documents import DecisionRecord
from abgate.runner import records as rec
from abgate.runner.documents import read_record
from abgate.schema import first_error
from abgate.signing import SIG_FILE, check_signature

RECORD_FILES = ("run.json", "ab.json", "baseline.json")
LINE_FILES = ("samples.jsonl", "agreement.jsonl")
DECISIONS_FILE = "decisions.jsonl"


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str


@dataclass
class VerifyReport:
    directory: Path
    findings: list[Finding] = field(default_factory=list)
    signer: str | None = None

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def add(self, ok: bool, what: str) -> None:
        self.findings.append(Finding(ok, what))


def _record(path: Path, report: VerifyReport) -> None:
    try:
        if path.name == "baseline.json":
            verify_file(path)
        doc = read_record(path)
    except AbgateError as exc:
        report.add(False, str(exc))
        return
    seal = "seal verified over its bytes, " if path.name == "baseline.json" else ""
    report.add(True, f"{path}: a {doc.kind!r} record, {seal}status {doc.status}")


def _lines(path: Path, report: VerifyReport) -> None:
    try:
        n = len(rec.read_sample_lines(path))
        if path.read_bytes() and not path.read_bytes().endswith(b"\n"):
            raise AbgateError(f"{path}: its last line is torn (no newline)")
    except AbgateError as exc:
        report.add(False, str(exc))
        return
    report.add(True, f"{path}: {n} whole JSON lines")


def _decisions(path: Path, report: VerifyReport) -> None:
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            DecisionRecord.model_validate_json(line)
        except ValidationError as exc:
            report.add(False, f"{path}:{i}: not a decision record "
                              f"({first_error(exc).message})")
            return
    report.add(True, f"{path}: every line a decision record")


def _records(directory: Path, report: VerifyReport) -> int:
    found = 0
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        if path.name in RECORD_FILES:
            found += 1
            _record(path, report)
        elif path.name in LINE_FILES:
            _lines(path, report)
        elif path.name == DECISIONS_FILE:
            _decisions(path, report)
    return found


def verify_directory(directory: Path, allowed_signers: Path | None = None) -> VerifyReport:
    """Every record under ``directory`` and, with ``allowed_signers``, its signature and
    the SHA-256 of every file it lists. No record at all is a UsageError (exit 2)."""
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such directory")
    if allowed_signers is not None and not allowed_signers.is_file():
        raise UsageError(f"--allowed-signers {allowed_signers}: no such file")
    report = VerifyReport(directory)
    if _records(directory, report) == 0:
        raise UsageError(f"{directory}: no abgate record ({', '.join(RECORD_FILES)}) in it "
                         "or below it")
    if allowed_signers is None:
        present = (directory / SIG_FILE).is_file()
        report.add(True, "signature: not checked (no --allowed-signers); " + (
            "the directory is signed" if present else "the directory is not signed: "
            "nothing but a baseline's seal vouches for its bytes"))
        return report
    check = check_signature(directory, allowed_signers)
    report.signer = check.signer
    for problem in check.problems:
        report.add(False, problem)
    if check.signer is not None:
        report.add(True, f"signature: good, by {check.signer!r} ({allowed_signers}); "
                   f"{len(check.matched)} files match the signed SHA-256s")
    return report
