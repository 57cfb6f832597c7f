"""``abgate manifest build|verify`` and ``abgate attach``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from abgate.cli.finishing import finish_dir
from abgate.cli.typer_app import app, group
from abgate.errors import AbgateError, UsageError
from abgate.provenance.attach import AttachRefused, attach
from abgate.provenance.manifest import BuildOptions, build_manifest, write_manifest
from abgate.provenance.verify import ManifestVerifyReport, verify_file

manifest_app = group(
    "manifest", "Build and verify provenance manifests (source tree, libraries, models, env).")


@contextmanager
def _errors_exit() -> Iterator[None]:
    """Print abgate's own errors as one line and exit with their code."""
    try:
        yield
    except AttachRefused as exc:
        typer.echo(f"abgate: error: {exc}", err=True)
        for line in exc.paths:
            typer.echo(f"  {line}", err=True)
        raise typer.Exit(exc.exit_code) from None
    except AbgateError as exc:
        typer.echo(f"abgate: error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _summary(manifest: dict[str, Any]) -> str:
    source = manifest["source"]
    model_files = sum(len(m["files"]) for m in manifest["models"])
    text = (f"{len(source['files'])} source files, {len(manifest['libraries'])} libraries, "
            f"{model_files} model files; digest {manifest['digest']}")
    git = source["git"]
    if git and git["commit"]:
        text += f"; commit {git['commit'][:12]}" + (" (dirty)" if git["dirty"] else "")
    return text


@manifest_app.command("build")
def build_cmd(
    root: Annotated[Path, typer.Option("--root", help="Tree to fingerprint.")] = Path("."),
    include: Annotated[list[str] | None, typer.Option(
        "--include", help="Glob of source paths to include (repeatable; default all).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", help="Glob of source paths to leave out (repeatable).")] = None,
    lib: Annotated[list[str] | None, typer.Option(
        "--lib", help="Native library path or glob, e.g. 'build/**/*.so' (repeatable).")] = None,
    model: Annotated[list[str] | None, typer.Option(
        "--model", help="Model file or directory to hash (repeatable).")] = None,
    sampled_model_hash: Annotated[bool, typer.Option(
        "--sampled-model-hash",
        help="Hash 64 evenly spaced 1 MiB slices of each model file instead of all of it "
             "(labelled 'sampled'; for very large checkpoints).")] = False,
    env_var: Annotated[list[str] | None, typer.Option(
        "--env-var", help="Extra env var to record (repeatable; secrets are redacted).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the manifest here (default: stdout).")] = None,
) -> None:
    """Hash the source tree, libraries and models, and record the environment."""
    options = BuildOptions(
        include=tuple(include or ()), exclude=tuple(exclude or ()), libs=tuple(lib or ()),
        models=tuple(model or ()), sampled_model_hash=sampled_model_hash,
        env_vars=tuple(env_var or ()),
    )
    with _errors_exit():
        ignore = [output.resolve()] if output is not None else []
        manifest = build_manifest(root, options, ignore=ignore)
        if output is None:
            typer.echo(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False))
            return
        write_manifest(manifest, output)
    typer.echo(f"wrote {output}: {_summary(manifest)}", err=True)


def _print_report(report: ManifestVerifyReport) -> None:
    for finding in report.problems:
        typer.echo(finding.line())
    for finding in report.notes:
        typer.echo(finding.line(), err=True)
    if report.ok:
        typer.echo("manifest verified: everything matches")
    else:
        typer.echo(f"manifest does NOT match: {len(report.problems)} difference(s)")


@manifest_app.command("verify")
def verify_cmd(
    file: Annotated[Path, typer.Argument(help="Manifest JSON written by 'manifest build'.")],
    root: Annotated[Path, typer.Option("--root", help="Tree to check.")] = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Re-hash everything; exit 0 if it all matches, 1 if not, 2 if the manifest is unusable."""
    with _errors_exit():
        report = verify_file(file, root)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


@app.command("attach")
def attach_cmd(
    result_dir: Annotated[Path, typer.Argument(help="Result directory with run.json, or an "
                                               "A/B directory (every arm's tree must "
                                               "match).")],
    commit: Annotated[str, typer.Option("--commit", help="Commit the results should also "
                                        "hold for.")],
    repo: Annotated[Path, typer.Option("--repo", help="Git checkout to read.")] = Path("."),
    require_signature: Annotated[bool, typer.Option(
        "--require-signature", help="Attach only a directory signed by a key in "
        "--allowed-signers, every file as signed.")] = False,
    allowed_signers: Annotated[Path | None, typer.Option(
        "--allowed-signers", help="ssh-keygen allowed_signers file (with "
        "--require-signature).")] = None,
) -> None:
    """Attach results to another commit, only if both commits have the identical tree."""
    if require_signature != (allowed_signers is not None):
        raise UsageError("--require-signature and --allowed-signers FILE go together")
    with _errors_exit():
        done = attach(result_dir, commit, repo,
                      allowed_signers=allowed_signers if require_signature else None)
    if any((result_dir / m).is_file() for m in ("ab.json", "run.json")):
        with contextlib.suppress(AbgateError):  # not one abgate can finish (another
            finish_dir(result_dir)  # tool's run.json): attached all the same
    verb = "already attached" if done.already_recorded else "attached"
    typer.echo(f"{verb}: results of {done.tested_commit[:12]} hold for {commit} "
               f"({done.attached_commit[:12]}); identical tree {done.tree[:12]}")
