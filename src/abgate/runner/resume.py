"""What a resume checks and records, the same for a run and an A/B (:func:`resumed`): it
runs the source its run started with (the git facts, :func:`check_same_source`) and reads
the same inputs (contract, manifest, an A/B's policy: :func:`check_same_inputs`), and
its entry is appended under the record's ``resumes``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.sections import GitState, Resume

GIT_FACTS = ("commit", "dirty", "diff_sha256")


def _facts(state: GitState | None) -> tuple[object, ...] | None:
    """The facts a resume compares (:data:`GIT_FACTS`), None outside a checkout."""
    return None if state is None else tuple(getattr(state, name) for name in GIT_FACTS)


def check_same_source(out: Path, recorded: GitState | None,
                      now: GitState | dict[str, Any] | None, allow: bool = False) -> str | None:
    """A resume must run the source its run started with: a new commit, or a tree made
    dirty (or edited further) since, is refused, so records never vouch for a mix;
    with ``allow`` (``--allow-source-change``) it is returned, to be recorded."""
    if isinstance(now, dict):
        now = GitState.model_validate(now)
    if _facts(recorded) == _facts(now):
        return None
    if recorded is None or now is None:
        what = "it was not in a git checkout" if recorded is None else "it is no longer in one"
    elif recorded.commit != now.commit:
        what = f"commit {str(recorded.commit)[:12]} then, {str(now.commit)[:12]} now"
    elif recorded.dirty != now.dirty:
        what = "clean then, dirty now" if now.dirty else "dirty then, clean now"
    else:
        what = "the uncommitted changes differ"
    if allow:
        return what
    raise UsageError(f"--resume {out}: the source checkout changed since the run started "
                     f"({what}); restore it, start a new directory, or pass "
                     "--allow-source-change (recorded under resumes)")


def check_same_inputs(out: Path, recorded: Any, now: dict[str, str | None]) -> None:
    """A resume reads the same contract, manifest (and, for an A/B, policy) as its first
    start (an edited or a dropped one is refused: the records would vouch for a check
    never made, or a verdict reached under two sets of rules)."""
    if not isinstance(recorded, dict):
        return  # a record from before inputs were hashed
    for name, sha in now.items():
        if name in recorded and recorded[name] != sha:  # (absent: not hashed back then)
            then = "none" if recorded.get(name) is None else f"SHA {str(recorded[name])[:12]}"
            shown = "none" if sha is None else f"SHA {sha[:12]}"
            raise UsageError(f"--resume {out}: the --{name} differs from the first start's "
                             f"({then} then, {shown} now); give the same file, or start a "
                             "new directory")


def resumed(doc: RunRecord | AbRecord, out: Path, git: GitState | None,
            inputs: dict[str, str | None] | None, allow_source_change: bool) -> None:
    """``doc`` (as recorded in ``out``) reopened by a resume whose source state is ``git``
    and whose inputs are ``inputs`` (None: not hashed): both checked against the record's
    (``allow_source_change``: a changed source is recorded, not refused), then the resume
    appended to ``doc.resumes``."""
    changed = check_same_source(out, doc.git, git, allow_source_change)
    if inputs is not None:
        check_same_inputs(out, doc.inputs, inputs)
    doc.resumes = [*doc.resumes, Resume(at=time.time(), from_status=doc.status, git=git,
                                        inputs=inputs, source_changed=changed)]
