"""Path safety and glob matching for manifests.

Every path a manifest names is either relative to the root (and must stay inside it,
symlinks included) or, for libraries and models given explicitly as absolute paths
at build time, absolute. ``..`` is refused everywhere.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path, PurePosixPath

from abgate.errors import UsageError


class PathEscape(UsageError):
    """A path that would leave the root (``..``, absolute, or a symlink pointing out)."""


def check_relative(rel: str, what: str = "path") -> PurePosixPath:
    """Refuse absolute paths, ``..`` components and empty paths; return the clean path."""
    if not rel or "\\" in rel or "\0" in rel:
        raise PathEscape(f"{what} {rel!r} is not a plain relative path")
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise PathEscape(f"{what} {rel!r} is absolute; only paths inside the root are allowed")
    if ".." in pure.parts:
        raise PathEscape(f"{what} {rel!r} contains '..' and could escape the root")
    if str(pure) != rel or rel == ".":
        raise PathEscape(f"{what} {rel!r} is not in normal form (expected {str(pure)!r})")
    return pure


def check_entry_path(path: str, what: str = "path") -> None:
    """Library/model entries: absolute is allowed (given so at build time), ``..`` never."""
    if path.startswith("/"):
        if ".." in PurePosixPath(path).parts or "\0" in path:
            raise PathEscape(f"{what} {path!r} contains '..'")
        return
    check_relative(path, what)


def is_inside(path: Path, root: Path) -> bool:
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def resolve_inside(root: Path, rel: str, what: str = "path") -> Path:
    """``root / rel`` after checking that neither the text nor a symlink leaves ``root``."""
    check_relative(rel, what)
    full = root / rel
    if not is_inside(full, root):
        raise PathEscape(
            f"{what} {rel!r} resolves to {os.path.realpath(full)}, outside the root "
            f"(a symlink points out); exclude it or move the target inside"
        )
    return full


def resolve_entry(root: Path, path: str, what: str = "path") -> Path:
    """Where a library/model entry lives: absolute as is, relative via :func:`resolve_inside`."""
    check_entry_path(path, what)
    if path.startswith("/"):
        return Path(path)
    return resolve_inside(root, path, what)


def entry_name(root: Path, path: Path) -> str:
    """How a file given at build time is recorded: relative to root if inside, else absolute."""
    if not is_inside(path, root):
        return Path(os.path.abspath(path)).as_posix()
    lexical = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if ".." not in Path(lexical).parts:
        return Path(lexical).as_posix()
    real_rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    return Path(real_rel).as_posix()


# ---- globs ---------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1:end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def glob_matches(pattern: str, rel: str) -> bool:
    """Does the relative posix path ``rel`` match ``pattern``?

    Rules: ``*`` and ``?`` stay within one path segment, ``**`` crosses segments; a
    pattern without ``/`` matches any single segment (``*.pyc``, ``__pycache__``); a
    pattern matches a path when it matches the path or any directory above it
    (``src`` covers ``src/a/b.py``). A leading ``/`` anchors at the root.
    """
    pat = pattern.strip().rstrip("/")
    if not pat:
        return False
    parts = rel.split("/")
    if "/" not in pat:
        rx = _glob_regex(pat)
        return any(rx.fullmatch(part) for part in parts)
    rx = _glob_regex(pat.lstrip("/"))
    return any(rx.fullmatch("/".join(parts[:k])) for k in range(1, len(parts) + 1))


def select(rel: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Kept when it matches some include (or there are none) and no exclude."""
    if include and not any(glob_matches(p, rel) for p in include):
        return False
    return not any(glob_matches(p, rel) for p in exclude)


def expand_patterns(root: Path, patterns: Iterable[str], what: str,
                    strict: bool = True) -> list[Path]:
    """Files named by shell-style patterns (``**`` recursive), relative ones under ``root``.

    With ``strict``, a pattern that names nothing is a usage error: a silent empty
    list would make a manifest or contract check nothing.
    """
    found: dict[str, Path] = {}
    for pattern in patterns:
        hits: list[Path] = []
        if os.path.isabs(pattern):
            hits = [Path(p) for p in glob.glob(pattern, recursive=True)]
        else:
            hits = [root / p for p in glob.glob(pattern, root_dir=root, recursive=True)]
        hits = [h for h in hits if h.is_file()]
        if not hits and strict:
            raise UsageError(f"{what} {pattern!r} matches no file (relative to {root})")
        for hit in hits:
            found.setdefault(os.path.normpath(hit), hit)
    return [found[k] for k in sorted(found)]
