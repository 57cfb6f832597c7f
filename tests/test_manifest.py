"""Manifests: build, verify, tampering, refusal of unusable manifests, path escapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import abgate.cli.provenance_cmd  # noqa: F401  (registers the commands)
from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.identity import canonical_json
from abgate.provenance.environment import environment_snapshot, selected_env
from abgate.provenance.loading import ManifestError, read_manifest
from abgate.provenance.manifest import (
    BuildOptions,
    build_manifest,
    content_digest,
    fingerprint,
    write_manifest,
)
from abgate.provenance.paths import PathEscape, glob_matches, select
from abgate.provenance.verify import verify_file, verify_manifest

runner = CliRunner()


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                         text=True, env=env)
    return out.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "build").mkdir()
    (root / "src" / "pkg" / "a.py").write_text("A = 1\n")
    (root / "src" / "pkg" / "b.py").write_text("B = 2\n")
    (root / "README.md").write_text("hello\n")
    (root / "build" / "libfast.so").write_bytes(b"\x7fELF fake library" * 10)
    (root / ".gitignore").write_text("build/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def built(root: Path, **kw: Any) -> dict[str, Any]:
    return build_manifest(root, BuildOptions(**kw))


def kinds(report: Any) -> set[tuple[str, str]]:
    return {(f.kind, f.where) for f in report.problems}


def test_build_records_git_tree_files_and_libs(repo: Path) -> None:
    m = built(repo, libs=("build/**/*.so",))
    git_info = m["source"]["git"]
    assert git_info["commit"] == git(repo, "rev-parse", "HEAD")
    assert git_info["tree"] == git(repo, "rev-parse", "HEAD^{tree}")
    assert git_info["dirty"] is False and git_info["diff_sha256"] is None
    paths = [f["path"] for f in m["source"]["files"]]
    assert paths == [".gitignore", "README.md", "src/pkg/a.py", "src/pkg/b.py"]
    assert m["source"]["fingerprint"] == fingerprint(m["source"]["files"])
    assert [lib["path"] for lib in m["libraries"]] == ["build/libfast.so"]
    assert m["digest"] == content_digest(m)
    assert verify_manifest(m, repo).ok


def test_include_exclude_globs(repo: Path) -> None:
    m = built(repo, include=("src",), exclude=("b.py",))
    assert [f["path"] for f in m["source"]["files"]] == ["src/pkg/a.py"]
    assert glob_matches("src/**/*.py", "src/pkg/a.py")
    assert glob_matches("*.pyc", "x/y/z.pyc")
    assert not glob_matches("src/*.py", "src/pkg/a.py")
    assert select("docs/x.md", ["src"], []) is False


def test_dirty_flag_and_diff_hash(repo: Path) -> None:
    (repo / "src" / "pkg" / "a.py").write_text("A = 3\n")
    first = built(repo)["source"]["git"]
    assert first["dirty"] is True and first["diff_sha256"]
    assert built(repo)["source"]["git"]["diff_sha256"] == first["diff_sha256"]
    (repo / "src" / "pkg" / "a.py").write_text("A = 4\n")
    assert built(repo)["source"]["git"]["diff_sha256"] != first["diff_sha256"]


def test_tampered_missing_extra_files(repo: Path) -> None:
    m = built(repo, libs=("build/*.so",))
    (repo / "src" / "pkg" / "a.py").write_text("A = 99\n")
    (repo / "src" / "pkg" / "b.py").unlink()
    (repo / "src" / "pkg" / "c.py").write_text("C = 1\n")
    (repo / "build" / "libfast.so").write_bytes(b"rebuilt")
    report = verify_manifest(m, repo)
    assert not report.ok
    found = kinds(report)
    assert ("changed", "file src/pkg/a.py") in found
    assert ("missing", "file src/pkg/b.py") in found
    assert ("extra", "file src/pkg/c.py") in found
    assert ("changed", "library build/libfast.so") in found
    assert ("field", "source.git.dirty") in found


def test_cli_build_and_verify_exit_codes(repo: Path, tmp_path: Path) -> None:
    out = repo / "manifest.json"
    res = runner.invoke(app, ["manifest", "build", "--root", str(repo), "--lib",
                              "build/*.so", "-o", str(out)])
    assert res.exit_code == 0, res.output
    git = read_manifest(out).source.git_state
    assert git is not None and git.dirty is False  # own file not counted
    res = runner.invoke(app, ["manifest", "verify", str(out), "--root", str(repo)])
    assert res.exit_code == 0, res.output
    assert "everything matches" in res.output
    (repo / "README.md").write_text("changed\n")
    res = runner.invoke(app, ["manifest", "verify", str(out), "--root", str(repo)])
    assert res.exit_code == 1
    assert "README.md" in res.output


def test_edited_manifest_field_is_listed(repo: Path, tmp_path: Path) -> None:
    m = built(repo)
    m["source"]["git"]["commit"] = "0" * 40
    path = tmp_path / "edited.json"
    write_manifest(m, path)
    report = verify_file(path, repo)
    found = kinds(report)
    assert ("digest", "manifest") in found
    assert ("field", "source.git.commit") in found
    res = runner.invoke(app, ["manifest", "verify", str(path), "--root", str(repo)])
    assert res.exit_code == 1 and "source.git.commit" in res.output


def test_edited_file_hash_in_manifest_is_listed(repo: Path, tmp_path: Path) -> None:
    m = built(repo)
    m["source"]["files"][1]["sha256"] = "f" * 64
    report = verify_manifest(m, repo)
    assert ("digest", "manifest") in kinds(report)
    assert ("changed", "file README.md") in kinds(report)


def test_truncated_manifest_is_rejected(repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    write_manifest(built(repo), path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ManifestError, match="truncated"):
        read_manifest(path)
    res = runner.invoke(app, ["manifest", "verify", str(path), "--root", str(repo)])
    assert res.exit_code == 2
    assert "truncated" in res.output


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m["source"].pop("files"), "required field 'source.files' is missing"),
        (lambda m: m.pop("digest"), "required field 'digest' is missing"),
        (lambda m: m["source"]["files"][0].pop("sha256"), "source.files[0].sha256"),
        (lambda m: m.update(schema_version=99), "newer than this abgate"),
        (lambda m: m.update(schema="something.else"), "not an abgate manifest"),
        (lambda m: m["source"].update(listing="svn"), "source.listing"),
    ],
)
def test_incomplete_or_unknown_manifest_rejected(repo: Path, tmp_path: Path, mutate: Any,
                                                 message: str) -> None:
    m = built(repo)
    mutate(m)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m))
    with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_manifest(path)


def test_self_inconsistent_manifest_rejected(repo: Path, tmp_path: Path) -> None:
    m = built(repo)
    m["source"]["files"][0]["sha256"] = "0" * 64
    m["digest"] = content_digest(m)  # digest is valid, fingerprint no longer is
    path = tmp_path / "m.json"
    write_manifest(m, path)
    with pytest.raises(ManifestError, match="self-inconsistent"):
        read_manifest(path)


@pytest.mark.parametrize("bad", ["../outside.txt", "/etc/passwd", "src/../../x"])
def test_manifest_paths_escaping_root_refused(repo: Path, tmp_path: Path, bad: str) -> None:
    m = built(repo)
    m["source"]["files"][0]["path"] = bad
    m["source"]["fingerprint"] = fingerprint(m["source"]["files"])
    m["digest"] = content_digest(m)
    path = tmp_path / "m.json"
    write_manifest(m, path)
    with pytest.raises(PathEscape):
        read_manifest(path)
    res = runner.invoke(app, ["manifest", "verify", str(path), "--root", str(repo)])
    assert res.exit_code == 2 and "root" in res.output


def test_symlink_pointing_outside_refused(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "x.py").write_text("X = 1\n")
    m = built(repo)
    # after the build, a directory in the tree is swapped for a link out of the root
    os.rename(repo / "src" / "pkg", tmp_path / "pkg-moved")
    os.symlink(secret, repo / "src" / "pkg")
    report = verify_manifest(m, repo)
    assert any(f.kind == "refused" and "outside the root" in f.detail for f in report.problems)
    with pytest.raises(PathEscape, match="outside the root"):
        build_manifest(repo)


def test_walk_mode_outside_git(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text("M = 1\n")
    (root / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"junk")
    m = build_manifest(root)
    assert m["source"]["listing"] == "walk" and m["source"]["git"] is None
    assert [f["path"] for f in m["source"]["files"]] == ["pkg/m.py"]
    assert verify_manifest(m, root).ok
    (root / "pkg" / "n.py").write_text("N = 1\n")
    assert ("extra", "file pkg/n.py") in kinds(verify_manifest(m, root))


def test_model_hashes_full_dir_and_sampled(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "models" / "ckpt").mkdir(parents=True)
    big = root / "models" / "m.gguf"
    big.write_bytes(os.urandom(3 << 20))
    (root / "models" / "ckpt" / "model-00001.safetensors").write_bytes(b"w1")
    (root / "models" / "ckpt" / "config.json").write_text("{}")
    m = build_manifest(root, BuildOptions(include=("nothing",),
                                          models=("models/m.gguf", "models/ckpt")))
    file_entry, dir_entry = m["models"]
    assert file_entry["hash_mode"] == "full" and "sha256" in file_entry["files"][0]
    assert [f["path"] for f in dir_entry["files"]] == [
        "models/ckpt/config.json", "models/ckpt/model-00001.safetensors"]
    sampled = build_manifest(root, BuildOptions(include=("nothing",), models=("models/m.gguf",),
                                                sampled_model_hash=True))
    entry = sampled["models"][0]
    assert entry["hash_mode"] == "sampled" and "sha256" not in entry["files"][0]
    assert entry["files"][0]["sampled_sha256"]
    with open(big, "r+b") as fh:  # the first slice is always sampled
        fh.write(b"changed!")
    assert ("changed", "model file models/m.gguf") in kinds(verify_manifest(sampled, root))
    (root / "models" / "ckpt" / "config.json").unlink()
    assert ("missing", "model file models/ckpt/config.json") in kinds(verify_manifest(m, root))


def test_missing_lib_pattern_is_usage_error(repo: Path) -> None:
    with pytest.raises(UsageError, match="matches no file"):
        built(repo, libs=("build/**/nothing*.so",))


def test_environment_snapshot_redacts_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret")
    monkeypatch.setenv("MY_API_KEY", "k-supersecret")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    had_torch = "torch" in sys.modules
    snap = environment_snapshot(["MY_API_KEY", "UNSET_VAR_X"])
    assert snap["env"]["HF_TOKEN"] == "<redacted>"
    assert snap["env"]["MY_API_KEY"] == "<redacted>"
    assert snap["env"]["OMP_NUM_THREADS"] == "3"
    assert snap["env"]["UNSET_VAR_X"] is None
    assert "supersecret" not in canonical_json(snap).decode()
    assert snap["python"]["version"] and "packages" in snap
    assert ("torch" in sys.modules) == had_torch
    assert selected_env(["PASSWORD_X"], {"PASSWORD_X": "p"}, ()) == {"PASSWORD_X": "<redacted>"}


def test_canonical_json_and_digest_exclude_digest_field() -> None:
    assert canonical_json({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'
    m: dict[str, Any] = {"x": 1}
    d = content_digest(m)
    m["digest"] = d
    assert content_digest(m) == d
