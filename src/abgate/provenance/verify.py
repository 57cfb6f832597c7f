"""Re-hash what a manifest describes and list every difference.

``problems`` make verification fail (exit 1): a digest that does not match the
content (the manifest was edited), a changed, missing or extra file, library or
model file, a git field that differs, or a file refused because it now escapes the
root. ``notes`` never fail it: environment differences (another machine or Python
is expected) and git metadata that cannot be read here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.provenance import gitinfo
from abgate.provenance.environment import environment_snapshot
from abgate.provenance.loading import read_manifest
from abgate.provenance.manifest import (
    BuildOptions,
    fingerprint,
    hash_libraries,
    hash_model,
    scan_tree,
)
from abgate.provenance.manifest_model import (
    LibraryFile,
    Manifest,
    ModelEntry,
    ModelFile,
    SourceFile,
)
from abgate.provenance.paths import entry_name


@dataclass(frozen=True)
class ManifestFinding:
    """One difference. ``kind``: digest, changed, missing, extra, refused, field or note."""

    kind: str
    where: str
    detail: str

    def line(self) -> str:
        return f"{self.kind:<8} {self.where}: {self.detail}" if self.detail \
            else f"{self.kind:<8} {self.where}"


@dataclass
class ManifestVerifyReport:
    problems: list[ManifestFinding] = field(default_factory=list)
    notes: list[ManifestFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": [asdict(f) for f in self.problems],
                "notes": [asdict(f) for f in self.notes]}


def _short(value: Any) -> str:
    text = str(value)
    return text[:19] + "…" if len(text) > 24 and " " not in text else text


Entry = SourceFile | LibraryFile | ModelFile


def compare_entries(section: str, expected: Sequence[Entry],
                    actual: Sequence[Entry]) -> list[ManifestFinding]:
    """Changed, missing and extra entries between two lists keyed by ``path``, every
    field compared."""
    want = {e.path: e for e in expected}
    have = {e.path: e for e in actual}
    out: list[ManifestFinding] = []
    for path in sorted(want.keys() | have.keys()):
        if path not in have:
            out.append(ManifestFinding("missing", f"{section} {path}",
                                       "in the manifest, not found"))
        elif path not in want:
            out.append(ManifestFinding("extra", f"{section} {path}", "found, not in the manifest"))
        else:
            was, now = want[path], have[path]
            diffs = [f"{k} {_short(getattr(was, k, None))} -> {_short(getattr(now, k, None))}"
                     for k in sorted(_fields(was) | _fields(now))
                     if getattr(was, k, None) != getattr(now, k, None)]
            if diffs:
                out.append(ManifestFinding("changed", f"{section} {path}", "; ".join(diffs)))
    return out


def _fields(entry: Entry) -> set[str]:
    """An entry's field names (a key a newer manifest added, too), compared by attribute."""
    return {*type(entry).model_fields, *(entry.model_extra or {})}


def _flatten(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key in sorted(value):
            yield from _flatten(value[key], f"{prefix}.{key}")
    else:
        yield prefix, value


def diff_fields(prefix: str, expected: Any, actual: Any) -> list[tuple[str, Any, Any]]:
    """(dotted field, manifest value, current value) for every leaf that differs."""
    want = dict(_flatten(expected, prefix))
    have = dict(_flatten(actual, prefix))
    return [(k, want.get(k), have.get(k)) for k in sorted(want.keys() | have.keys())
            if want.get(k) != have.get(k)]


def _check_source(manifest: Manifest, root: Path, ignore: set[str],
                  report: ManifestVerifyReport) -> None:
    source, params = manifest.source, manifest.params
    listing = "walk" if source.listing == "walk" else None
    scan = scan_tree(root, params.include, params.exclude, listing, ignore)
    if scan.listing != source.listing:
        report.notes.append(ManifestFinding("note", "source.listing", f"manifest listed files with "
                                    f"{source.listing}, here with {scan.listing}"))
    for rel, reason in scan.refused.items():
        report.problems.append(ManifestFinding("refused", f"file {rel}", reason))
    fresh = [e for e in scan.files if e.path not in scan.refused]
    kept = [e for e in source.files if e.path not in scan.refused]
    file_findings = compare_entries("file", kept, fresh)
    report.problems.extend(file_findings)
    if not file_findings and not scan.refused and fingerprint(fresh) != source.fingerprint:
        report.problems.append(ManifestFinding("field", "source.fingerprint",
                                       "does not match the files (edited)"))
    git_now = gitinfo.git_state(root, ignore=[root / p for p in ignore]) \
        if scan.listing == "git" else None
    if source.git is not None and git_now is None:
        report.notes.append(ManifestFinding("note", "source.git", "no git checkout here; "
                                    "file contents were checked, commit and tree were not"))
    elif source.git is not None and git_now is not None:
        for name, want, have in diff_fields("source.git", source.git, git_now):
            report.problems.append(ManifestFinding("field", name,
                                                   f"manifest {want!r}, here {have!r}"))


def _check_artifacts(manifest: Manifest, root: Path, report: ManifestVerifyReport) -> None:
    opts = BuildOptions.from_params(manifest.params)
    libs = hash_libraries(root, opts.libs, strict=False)
    report.problems.extend(compare_entries("library", manifest.libraries, libs))
    fresh: dict[str, ModelEntry] = {}
    for given in opts.models:
        try:
            entry = hash_model(root, given, opts.sampled_model_hash)
        except UsageError:
            continue
        fresh[entry.path] = entry
    for model in manifest.models:
        now = fresh.pop(model.path, None)
        mode = now.hash_mode if now is not None else model.hash_mode
        if mode != model.hash_mode:
            report.problems.append(ManifestFinding("field", f"model {model.path}", "hash mode "
                                           f"{model.hash_mode} -> {mode}"))
        report.problems.extend(compare_entries("model file", model.files,
                                               now.files if now is not None else []))
    for path in sorted(fresh):
        report.problems.append(ManifestFinding("extra", f"model {path}", "named in params, "
                                       "not in the manifest's models"))


def verify_manifest(manifest: Manifest | Mapping[str, Any], root: Path | str,
                    ignore: Collection[Path] = ()) -> ManifestVerifyReport:
    """Compare a loaded (or built) manifest with what is on disk under ``root`` now."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"root {str(root)!r} is not a directory")
    manifest = Manifest.of(manifest)
    report = ManifestVerifyReport()
    if not manifest.digest_matches:
        report.problems.append(ManifestFinding("digest", "manifest", "content does not match its "
                                       "digest: the manifest was edited after it was built"))
    skip = {entry_name(root, Path(p)) for p in ignore}
    _check_source(manifest, root, skip, report)
    _check_artifacts(manifest, root, report)
    env_now = environment_snapshot(manifest.params.env_vars)
    for name, want, have in diff_fields("environment", manifest.environment, env_now):
        report.notes.append(ManifestFinding("note", name, f"manifest {want!r}, here {have!r}"))
    return report


def verify_file(path: Path | str, root: Path | str) -> ManifestVerifyReport:
    """Load (refusing unusable manifests) and verify; the manifest file itself is ignored."""
    manifest = read_manifest(path)
    return verify_manifest(manifest, root, ignore=[Path(path).resolve()])
