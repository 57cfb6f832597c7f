"""A provenance manifest (``manifest.json``, docs/provenance.md), typed: one model for
the builder (:func:`abgate.provenance.manifest.build_manifest`), the reader
(:func:`abgate.provenance.loading.read_manifest`) and every check that uses one
(``verify``, ``attach``, the runner's ``--manifest``).

The models are :class:`~abgate.records.sections.Section`\\ s (unknown keys kept,
optional fields written only when set) and are validated strictly, so a manifest read
and dumped again is the JSON object it was, key for key and value for value: its
digest (:func:`content_digest`) is over that object. The model is the reader's check
of the required fields and their types (``loading.check_structure`` validates with it
and words its first error); the others (a list's items, the optional fields, the git
facts) are typed ``Any`` or as plain JSON, as they are read. ``schema`` is kept as an
unknown key (the name shadows pydantic's own); the reader checks it before any model
is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from abgate.identity import digest_json
from abgate.provenance.gitinfo import git_facts
from abgate.records.sections import GitState, Section

HashMode = Literal["full", "sampled"]


class SourceFile(Section):
    """One file of the source tree (a symlink: its target text hashed)."""

    path: str
    mode: str
    size: int
    sha256: str


class LibraryFile(Section):
    """One native library the manifest names (absolute when given absolute)."""

    path: str
    size: int
    sha256: str


class ModelFile(Section):
    """One model file: its full SHA-256, or a sampled one (``hash_mode`` says which)."""

    path: str
    size: int
    sha256: Any = None  # a str where hash_mode says it is the file's hash
    sampled_sha256: Any = None


class ModelEntry(Section):
    """One ``--model`` entry: a file, or every file under a directory."""

    path: str
    kind: str
    hash_mode: HashMode
    files: list[ModelFile]
    sample: Any = None  # sampled: the chunks and their size


class ManifestParams(Section):
    """What the manifest was built with (``BuildOptions.to_params``), so ``verify``
    can redo it."""

    include: list[Any]  # patterns (str)
    exclude: list[Any]
    libs: list[Any]
    models: list[Any]
    model_hash_mode: HashMode
    env_vars: list[Any]


class ManifestSource(Section):
    """The source tree: how it was listed, its git state, its fingerprint and files."""

    listing: Literal["git", "walk"]
    git: dict[str, Any] | None  # gitinfo.git_state's facts, as recorded
    fingerprint: str
    file_count: Any = None  # an int, the number of files
    files: list[SourceFile]

    @property
    def git_state(self) -> GitState | None:
        """The git facts typed (a fact of another type left out: unknown)."""
        return git_facts(self.git)


class Manifest(Section):
    """A manifest as built and as read (``schema`` among its unknown keys)."""

    schema_version: int
    created_at: str
    abgate_version: Any = None
    params: ManifestParams
    source: ManifestSource
    libraries: list[LibraryFile]
    models: list[ModelEntry]
    environment: dict[str, Any]
    digest: str

    @classmethod
    def of(cls, manifest: Manifest | Mapping[str, Any]) -> Manifest:
        """``manifest`` as the model (a built or parsed JSON object validated strictly:
        nothing coerced, so it dumps back to the same object)."""
        if isinstance(manifest, Manifest):
            return manifest
        return cls.model_validate(dict(manifest), strict=True)

    def content_digest(self) -> str:
        """The digest this manifest should carry (:func:`content_digest`)."""
        return content_digest(self.to_dict())

    @property
    def digest_matches(self) -> bool:
        """Whether ``digest`` is over this content (False: edited after the build)."""
        return self.digest == self.content_digest()


def content_digest(manifest: Mapping[str, Any]) -> str:
    """The digest a manifest should carry: over everything except ``digest`` itself."""
    return digest_json({k: v for k, v in manifest.items() if k != "digest"})
