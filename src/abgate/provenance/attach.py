"""Tree-identity attachment: results measured on one commit also hold for another
only when both commits have the identical tree hash.

The tested commit comes from ``RESULT_DIR/run.json`` (a run's or a bench's
``git.commit``, read through the record's header model), ``RESULT_DIR/baseline.json``
(``git.commit``, its seal verified first: an edited baseline vouches for nothing) or,
failing those,
``RESULT_DIR/manifest.json`` (``source.git.commit``). An A/B directory (``ab.json``)
attaches as a whole: ``ab.json`` and every arm's ``arms/<arm>/run.json`` must record the
same clean commit and tree. Results measured on a dirty tree belong to no commit and are
never attached. A success appends one JSON line to ``RESULT_DIR/attachments.jsonl``
(flushed and fsynced).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from abgate.errors import AbgateError, UsageError
from abgate.integrity import verify_file
from abgate.jsonl_append import append_line
from abgate.provenance import gitinfo
from abgate.provenance.loading import read_manifest
from abgate.records.documents import AbRecord, RecordHeader
from abgate.records.side_documents import AttachmentRecord
from abgate.safejson import BadJson, parse, read_json
from abgate.schema import first_error
from abgate.signing import check_signature

RUN_FILE = "run.json"
BASELINE_FILE = "baseline.json"
AB_FILE = "ab.json"
MANIFEST_FILE = "manifest.json"
ATTACHMENTS_FILE = "attachments.jsonl"
H = TypeVar("H", bound=RecordHeader)


class AttachRefused(AbgateError):
    """The trees differ (or the tested commit is unknown/dirty); nothing was recorded."""

    def __init__(self, message: str, paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.paths = paths or []


@dataclass(frozen=True)
class MeasuredSource:
    """The commit a result directory was measured on, and where that was read."""

    commit: str
    tree: str | None
    dirty: bool | None
    origin: str


@dataclass(frozen=True)
class Attachment:
    tested_commit: str
    attached_commit: str
    attached_rev: str
    tree: str
    origin: str
    attached_at: str
    already_recorded: bool = False

    def record(self) -> AttachmentRecord:
        """The ``attachments.jsonl`` line this attachment is recorded as."""
        return AttachmentRecord(tested_commit=self.tested_commit,
                                attached_commit=self.attached_commit,
                                attached_rev=self.attached_rev, tree=self.tree,
                                tested_commit_from=self.origin, attached_at=self.attached_at)


def _read_json(path: Path) -> Any:
    return read_json(path, error=AbgateError)


def _from_run(path: Path) -> MeasuredSource | None:
    if path.name == BASELINE_FILE:
        try:
            data: Any = verify_file(path)  # the bytes on disk against their seal
        except UsageError as exc:
            raise AttachRefused(f"{exc}; it cannot vouch for a commit") from None
    else:
        data = _read_json(path)
    git = _validated(path, RecordHeader, data).git
    if git is None or not git.commit:
        return None
    return MeasuredSource(git.commit, git.tree, git.dirty, f"{path.name} git.commit")


def _from_manifest(path: Path) -> MeasuredSource | None:
    manifest = read_manifest(path)
    if not manifest.digest_matches:
        raise AttachRefused(f"{path} was edited after it was built (digest mismatch); "
                            "it cannot vouch for a commit")
    git = manifest.source.git_state
    if git is None or not git.commit:
        return None
    return MeasuredSource(git.commit, git.tree, git.dirty, f"{MANIFEST_FILE} source.git.commit")


def _ab_record(path: Path) -> AbRecord:
    """``ab.json`` read into its model (an older one migrated); a damaged one is refused."""
    return _validated(path, AbRecord, _read_json(path))


def _validated(path: Path, model: type[H], data: Any) -> H:
    """A record's ``data`` read into ``model`` (its header, or the whole ``ab.json``; an
    older one migrated); a damaged one is refused in one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = first_error(exc)
        raise AttachRefused(f"{path}: {first.dotted or '<root>'}: {first.message}; it "
                            "cannot vouch for a commit") from None


def _from_ab(result_dir: Path, ab: AbRecord) -> MeasuredSource:
    """The one commit ``ab.json`` and every arm's ``run.json`` were written on."""
    found = {AB_FILE: _from_run(result_dir / AB_FILE)}
    for arm in ab.experiment.arms:
        path = result_dir / "arms" / arm / RUN_FILE
        if not path.is_file():
            raise AttachRefused(f"arm {arm!r} of {result_dir} has no {RUN_FILE}: the A/B "
                                "cannot vouch for that arm's source tree")
        found[f"arm {arm!r}"] = _from_run(path)
    missing = [where for where, src in found.items() if src is None]
    if missing:
        raise AttachRefused(f"cannot tell which commit {result_dir} was measured on: no "
                            f"git.commit for {', '.join(missing)}")
    sources = {where: src for where, src in found.items() if src is not None}
    dirty = [where for where, src in sources.items() if src.dirty]
    if dirty:
        raise AttachRefused(f"{result_dir}: {', '.join(dirty)} ran on a dirty tree "
                            "(uncommitted changes); its results belong to no commit")
    if len({(src.commit, src.tree) for src in sources.values()}) > 1:
        shown = "; ".join(f"{where} commit {src.commit[:12]} tree {str(src.tree)[:12]}"
                          for where, src in sources.items())
        raise AttachRefused(f"{result_dir}: the arms ran on different trees ({shown}); "
                            "the A/B cannot be attached as a whole")
    first = next(iter(sources.values()))
    return MeasuredSource(first.commit, first.tree, False,
                          f"{AB_FILE} and {len(sources) - 1} arms' {RUN_FILE} git.commit")


def _from_source(path: Path, ab: AbRecord) -> MeasuredSource | None:
    """A revision A/B (``ab.json`` ``source``): the head revision it gated, as built
    (a build is of a committed, clean tree); None for any other A/B."""
    if ab.source is None:
        return None
    heads = [(arm, b) for arm, b in ab.source.builds.items() if arm != ab.experiment.baseline]
    if len(heads) != 1:
        raise AttachRefused(f"{path}: its source section does not name one head build")
    arm, build = heads[0]
    return MeasuredSource(build.commit, build.tree, False,
                          f"{AB_FILE} source.builds.{arm}.commit (the head revision)")


def tested_source(result_dir: Path) -> MeasuredSource:
    """The commit the results in ``result_dir`` were measured on (a revision A/B's:
    its head revision, in the engine's repository)."""
    found: MeasuredSource | None = None
    if (result_dir / AB_FILE).is_file():
        ab = _ab_record(result_dir / AB_FILE)
        return _from_source(result_dir / AB_FILE, ab) or _from_ab(result_dir, ab)
    for name in (RUN_FILE, BASELINE_FILE):
        if found is None and (result_dir / name).is_file():
            found = _from_run(result_dir / name)
    if found is None and (result_dir / MANIFEST_FILE).is_file():
        found = _from_manifest(result_dir / MANIFEST_FILE)
    if found is None:
        raise AttachRefused(f"cannot tell which commit {result_dir} was measured on: no "
                            f"git.commit in {RUN_FILE} or {BASELINE_FILE} and no "
                            f"source.git.commit in {MANIFEST_FILE}")
    if found.dirty:
        raise AttachRefused(f"{result_dir} was measured on a dirty tree (uncommitted changes, "
                            f"per {found.origin.split()[0]}); its results belong to no commit")
    return found


def _append_line(path: Path, record: dict[str, Any]) -> None:
    """One line, after a torn last line is cut (kept in ``.torn``: abgate.jsonl_append)."""
    line = json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"
    append_line(path, line.encode("utf-8"))


def _existing(path: Path, tested: str, attached: str) -> AttachmentRecord | None:
    if not path.is_file():
        return None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = AttachmentRecord.model_validate(parse(line))
        except (BadJson, ValidationError):
            continue  # a torn line from a crash, or not an attachment
        if rec.tested_commit == tested and rec.attached_commit == attached:
            return rec
    return None


def _refuse_different(repo: Path, tested: str, target: str, rev: str) -> AttachRefused:
    paths = gitinfo.name_status(repo, tested, target)
    shown = ", ".join(p.replace("\t", " ") for p in paths[:20])
    more = f" and {len(paths) - 20} more" if len(paths) > 20 else ""
    return AttachRefused(f"trees differ between tested commit {tested[:12]} and {rev} "
                         f"({target[:12]}); {len(paths)} path(s) differ: {shown}{more}", paths)


def _checkable(source: MeasuredSource, repo: Path) -> str:
    """Refuse a record whose git facts cannot be checked against ``repo``: no tree hash
    beside its commit (the tree is what git recomputes from the commit), or no word on
    whether the tree was clean. Returns the recorded tree hash."""
    if source.tree is None:
        raise AttachRefused(f"{source.origin} {source.commit[:12]} has no tree hash beside "
                            f"it: the record cannot be checked against {repo} (abgate "
                            "records both; record the results again)")
    if source.dirty is not False:
        raise AttachRefused(f"{source.origin} does not say whether the tree was clean "
                            "(no 'dirty': false): its results belong to no known commit")
    return source.tree


def _signed(result_dir: Path, allowed_signers: Path) -> None:
    """Refuse unless ``result_dir`` is signed by a key in ``allowed_signers`` and every
    file is as signed (the record's git facts among them)."""
    found = check_signature(result_dir, allowed_signers)
    if not found.ok:
        more = f" (+{len(found.problems) - 1} more)" if len(found.problems) > 1 else ""
        raise AttachRefused(f"{found.problems[0]}{more}; a signature is required "
                            "(--require-signature)")


def attach(result_dir: Path | str, rev: str, repo: Path | str = ".", *,
           allowed_signers: Path | None = None) -> Attachment:
    """Record that ``result_dir``'s results hold for ``rev``, iff the trees are identical;
    with ``allowed_signers``, only when the directory is signed by one of them."""
    result_dir, repo = Path(result_dir), Path(repo)
    if not result_dir.is_dir():
        raise UsageError(f"result directory {str(result_dir)!r} does not exist")
    if gitinfo.toplevel(repo) is None:
        raise UsageError(f"{str(repo)!r} is not inside a git checkout (use --repo)")
    if allowed_signers is not None:
        _signed(result_dir, allowed_signers)
    source = tested_source(result_dir)
    recorded = _checkable(source, repo)
    tested = gitinfo.resolve_commit(repo, source.commit)
    tree = gitinfo.tree_of(repo, tested)
    if recorded != tree:
        raise AttachRefused(f"{source.origin} records tree {recorded[:12]} but commit "
                            f"{tested[:12]} has tree {tree[:12]}; the record is inconsistent")
    target = gitinfo.resolve_commit(repo, rev)
    if gitinfo.tree_of(repo, target) != tree:
        raise _refuse_different(repo, tested, target, rev)
    log = result_dir / ATTACHMENTS_FILE
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    found = _existing(log, tested, target)
    if found is not None:
        return Attachment(tested, target, rev, tree, source.origin,
                          found.attached_at or now, already_recorded=True)
    attachment = Attachment(tested, target, rev, tree, source.origin, now)
    _append_line(log, attachment.record().line())
    return attachment
