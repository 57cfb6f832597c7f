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

from abgate.errors import UsageError, one_line
from abgate.provenance.manifest import SCHEMA, SCHEMA_VERSION, fingerprint
from abgate.provenance.manifest_model import Manifest
from abgate.provenance.paths import check_entry_path, check_relative
from abgate.safejson import BadJson, parse

_TOP = {"schema": str, "schema_version": int, "created_at": str, "params": dict,
        "source": dict, "libraries": list, "models": list, "environment": dict,
        "digest": str}
_PARAMS = {"include": list, "exclude": list, "libs": list, "models": list,
           "model_hash_mode": str, "env_vars": list}
_SOURCE = {"listing": str, "git": (dict, type(None)), "fingerprint": str, "files": list}
_TREE_FILE = {"path": str, "mode": str, "size": int, "sha256": str}
_LIB_FILE = {"path": str, "size": int, "sha256": str}
_MODEL = {"path": str, "kind": str, "hash_mode": str, "files": list}
_MODEL_FILE = {"path": str, "size": int}


class ManifestError(UsageError):
    """A manifest that is refused before any comparison."""


def _require(obj: Any, fields: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ManifestError(f"incomplete manifest: {where or 'top level'} is not an object")
    for key, kind in fields.items():
        name = f"{where}.{key}" if where else key
        if key not in obj:
            raise ManifestError(f"incomplete manifest: required field {name!r} is missing")
        value = obj[key]
        if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):
            raise ManifestError(f"invalid manifest: field {name!r} has the wrong type "
                                f"({type(value).__name__})")
    return obj


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
    if data.get("schema") != SCHEMA:
        raise ManifestError(f"not an abgate manifest: schema is {data.get('schema')!r}, "
                            f"expected {SCHEMA!r}")
    version = data.get("schema_version")
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


def _check_choice(value: Any, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ManifestError(f"invalid manifest: {name} is {value!r}, expected one of "
                            + ", ".join(choices))


def check_structure(data: Any) -> dict[str, Any]:
    """Schema, required fields, types and path safety. Returns the manifest."""
    _check_schema(data)
    manifest = _require(data, _TOP, "")
    params = _require(manifest["params"], _PARAMS, "params")
    source = _require(manifest["source"], _SOURCE, "source")
    _check_choice(source["listing"], ("git", "walk"), "source.listing")
    _check_choice(params["model_hash_mode"], ("full", "sampled"), "params.model_hash_mode")
    files = [_require(entry, _TREE_FILE, f"source.files[{i}]")
             for i, entry in enumerate(source["files"])]
    _check_paths([e["path"] for e in files], "source file", relative_only=True)
    libraries = [_require(entry, _LIB_FILE, f"libraries[{i}]")
                 for i, entry in enumerate(manifest["libraries"])]
    _check_paths([e["path"] for e in libraries], "library", relative_only=False)
    for i, model in enumerate(manifest["models"]):
        _check_model(model, f"models[{i}]")
    return manifest


def _check_model(data: Any, where: str) -> None:
    model = _require(data, _MODEL, where)
    mode = model["hash_mode"]
    _check_choice(mode, ("full", "sampled"), f"{where}.hash_mode")
    check_entry_path(model["path"], "model")
    key = "sampled_sha256" if mode == "sampled" else "sha256"
    files = [_require(entry, {**_MODEL_FILE, key: str}, f"{where}.files[{j}]")
             for j, entry in enumerate(model["files"])]
    _check_paths([e["path"] for e in files], "model file", relative_only=False)


def _typed(data: dict[str, Any]) -> Manifest:
    """The checked manifest as the model. The model requires no more than
    :func:`check_structure` checks (``manifest_model``'s doc), so this refuses nothing the
    checks accepted; were it to, that is still a one-line refusal, not a traceback."""
    try:
        return Manifest.of(data)
    except ValidationError as exc:
        raise ManifestError(f"invalid manifest: {one_line(exc)}") from None


def read_manifest(path: Path | str) -> Manifest:
    """Parse and check a manifest file; see the module doc for what is refused."""
    try:
        manifest = _checked(Path(path))
    except ManifestError as exc:
        text = str(exc)
        raise ManifestError(text if str(path) in text else f"manifest {path}: {text}") from None
    return manifest


def load_manifest(path: Path | str) -> dict[str, Any]:
    """:func:`read_manifest`, as the JSON object it read."""
    return read_manifest(path).to_dict()


def _checked(path: Path) -> Manifest:
    manifest = _typed(check_structure(_parse(path)))
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
