"""A resume runs the source its run started with: the check of the git facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.records.sections import GitState

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


__all__ = ["GIT_FACTS", "check_same_source"]
