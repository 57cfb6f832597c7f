"""``abgate verify DIR`` and ``abgate sign DIR``: records checked as they are on disk,
and signed with an SSH key (``docs/signing.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.signing import check_key, sign_directory
from abgate.verify import verify_directory

SignKey = Annotated[Path | None, typer.Option(
    "--sign", help="Sign the directory with this SSH key (ssh-keygen -Y sign, namespace "
    "abgate): signed-files.json lists every file's SHA-256, signed-files.json.sig signs it.")]


def check_sign_key(key: Path | None) -> None:
    """Refuse a bad ``--sign KEY`` (exit 2) before anything is written."""
    if key is not None:
        check_key(key)


def sign_after(directory: Path, key: Path | None) -> None:
    if key is not None:
        sig = sign_directory(directory, key)
        typer.echo(f"signed: {sig}")


@app.command("verify")
def verify_command(
    directory: Annotated[Path, typer.Argument(help="A run, bench, baseline or A/B "
                                              "directory.")],
    allowed_signers: Annotated[Path | None, typer.Option(
        "--allowed-signers", help="ssh-keygen allowed_signers file: the signature must "
        "verify against it (and every file match the signed SHA-256s).")] = None,
) -> None:
    """Check every record as it is on disk (a baseline's seal over its bytes, each
    record's model, whole JSON lines) and, with --allowed-signers, the signature over
    every file. Exit 0 if all holds, 1 if not, 2 for bad input."""
    report = verify_directory(directory, allowed_signers)
    for finding in report.findings:
        typer.echo(f"{'ok  ' if finding.ok else 'FAIL'} {finding.what}")
    typer.echo(f"verify {directory}: {'OK' if report.ok else 'FAILED'}")
    raise typer.Exit(0 if report.ok else 1)


@app.command("sign")
def sign_command(
    directory: Annotated[Path, typer.Argument(help="A result directory to sign.")],
    key: Annotated[Path, typer.Option("--key", help="SSH private key (or a public key "
                                      "whose private key is in ssh-agent).")],
) -> None:
    """Sign every file of a result directory (replacing an earlier signature)."""
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such directory")
    check_key(key)
    sign_after(directory, key)
