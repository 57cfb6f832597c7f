"""Read a manifest back and refuse one that cannot be trusted to mean anything.

Refused (``UsageError``, exit 2): unreadable, truncated or non-JSON text; another
schema; a schema version newer than this abgate; a required field missing or of the
wrong type; a path that escapes the root; duplicate paths; and a manifest whose
digest matches but whose fingerprint disagrees with its own file list
(self-inconsistent). A digest that does *not* match is not refused here: that is an
edited manifest, which ``verify`` reports field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from abgate.errors import UsageError
from abgate.provenance.manifest import SCHEMA, SCHEMA_VERSION, fingerprint
from abgate.provenance.manifest_model import Manifest, ModelEntry
from abgate.provenance.paths import check_entry_path, check_relative
from abgate.records.migrations import Stamp
from abgate.safejson import BadJson, parse
from abgate.schema import first_error


class ManifestError(UsageError):
    """A manifest that is refused before any comparison."""


class _NonFinite(Exception):  # not a ValueError: the guarded parser lets it through
    pass


def _no_constant(name: str) -> Any:
    """NaN and Infinity: Python's json reads them, canonical JSON (the digest) cannot."""
    raise _NonFinite(name)


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"manifest {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read manifest {str(path)!r}: {exc}") from None
    if not text.strip():
        raise ManifestError(f"manifest {str(path)!r} is empty")
    try:
        return parse(text, parse_constant=_no_constant)
    except _NonFinite as exc:
        raise ManifestError(f"manifest {path}: not valid JSON ({exc} is not a JSON "
                            "number)") from None
    except BadJson as exc:
        if exc.detail is None:  # a limit of the guarded reader (depth, digits)
            raise ManifestError(f"manifest {exc.at(str(path))}") from None
        hint = "truncated: the JSON ends early" if exc.truncated else "not valid JSON"
        raise ManifestError(f"manifest {path}:{exc.line}: {hint} ({exc.detail} at line "
                            f"{exc.line} column {exc.column})") from None


def _check_schema(data: Any) -> None:
    if not isinstance(data, dict):
        raise ManifestError("invalid manifest: the top level is not a JSON object")
    stamp = Stamp.of(data)
    if stamp.schema != SCHEMA:
        raise ManifestError(f"not an abgate manifest: schema is {stamp.schema!r}, "
                            f"expected {SCHEMA!r}")
    version = stamp.schema_version
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ManifestError(f"invalid manifest: schema_version {version!r} is not a "
                            "positive integer")
    if version > SCHEMA_VERSION:
        raise ManifestError(f"manifest schema_version {version} is newer than this abgate "
                            f"understands ({SCHEMA_VERSION}); upgrade abgate to read it")


def _check_paths(paths: list[str], what: str, relative_only: bool) -> None:
    seen: set[str] = set()
    for rel in paths:
        if relative_only:
            check_relative(rel, what)
        else:
            check_entry_path(rel, what)
        if rel in seen:
            raise ManifestError(f"self-inconsistent manifest: {what} {rel!r} is listed twice")
        seen.add(rel)


def _refusal(exc: ValidationError) -> ManifestError:
    """The one-line refusal of the model's first problem."""
    err = first_error(exc)
    name = err.path or "top level"
    if err.type == "missing":
        return ManifestError(f"incomplete manifest: required field {name!r} is missing")
    if err.type == "literal_error":
        return ManifestError(f"invalid manifest: {name} is {err.value!r}, expected one of "
                             f"{err.expected}")
    return ManifestError(f"invalid manifest: field {name!r} has the wrong type "
                         f"({type(err.value).__name__})")


def check_structure(data: Any) -> Manifest:
    """Schema, required fields, types (the model, validated strictly: nothing coerced, so
    it dumps back to the object it read) and path safety. Returns the manifest."""
    _check_schema(data)
    try:
        manifest = Manifest.of(data)
    except ValidationError as exc:
        raise _refusal(exc) from None
    _check_paths([f.path for f in manifest.source.files], "source file", relative_only=True)
    _check_paths([f.path for f in manifest.libraries], "library", relative_only=False)
    for i, model in enumerate(manifest.models):
        _check_model(model, f"models[{i}]")
    return manifest


def _check_model(model: ModelEntry, where: str) -> None:
    check_entry_path(model.path, "model")
    key = "sampled_sha256" if model.hash_mode == "sampled" else "sha256"
    for j, entry in enumerate(model.files):
        name = f"{where}.files[{j}].{key}"
        if key not in entry.model_fields_set:
            raise ManifestError(f"incomplete manifest: required field {name!r} is missing")
        value = getattr(entry, key)
        if not isinstance(value, str):
            raise ManifestError(f"invalid manifest: field {name!r} has the wrong type "
                                f"({type(value).__name__})")
    _check_paths([e.path for e in model.files], "model file", relative_only=False)


def read_manifest(path: Path | str) -> Manifest:
    """Parse and check a manifest file; see the module doc for what is refused."""
    try:
        manifest = _checked(Path(path))
    except ManifestError as exc:
        text = str(exc)
        raise ManifestError(text if str(path) in text else f"manifest {path}: {text}") from None
    return manifest


def _checked(path: Path) -> Manifest:
    manifest = check_structure(_parse(path))
    if manifest.digest_matches:
        files = manifest.source.files
        if fingerprint(files) != manifest.source.fingerprint:
            raise ManifestError("self-inconsistent manifest: source.fingerprint does not "
                                "match the listed source files")
        count = manifest.source.file_count
        if count is not None and count != len(files):
            raise ManifestError(f"self-inconsistent manifest: source.file_count is {count} "
                                f"but {len(files)} files are listed")
    return manifest
