"""Optional signatures over a record directory, as git signs commits: an SSH key and
``ssh-keygen -Y`` (namespace ``abgate``), through a subprocess.

What is signed is a small list, ``signed-files.json``: the SHA-256 of every file in the
directory and below it (records, samples, logs, reports; an A/B's arms and decisions
too), so the signature covers the records' bytes. Its detached signature is
``signed-files.json.sig`` (the armored ``ssh-keygen -Y sign`` output). Signing again
(``decide --sign`` after a decision) replaces both. ``attachments.jsonl`` is appended by
``abgate attach`` after signing and is never listed.

:func:`check_key` is run before anything is written (a bad ``--sign`` exits 2 with
nothing written): it signs a fixed text through stdin, so no file is made. A signature
says who vouches for the bytes, with a key; not that the numbers are right
(``docs/signing.md``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from abgate import __version__
from abgate.dirlock import LOCK_FILE
from abgate.errors import AbgateError, UsageError
from abgate.identity import sha256_file

NAMESPACE = "abgate"
SUMS_FILE = "signed-files.json"
SIG_FILE = SUMS_FILE + ".sig"
# attachments.jsonl: appended by abgate attach after signing; never listed either, at any
# depth: an output directory's lock (LOCK_FILE), rewritten by every command claiming it
NOT_SIGNED = frozenset({SUMS_FILE, SIG_FILE, "attachments.jsonl"})
_PROBE = b"abgate: can this key sign?\n"


def _keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise UsageError("ssh-keygen is not installed (apt-get install openssh-client); "
                         "abgate signs and verifies with it")
    return found


def _run(args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """ssh-keygen in a session of its own (no terminal: a key's passphrase is never
    prompted for, the call fails instead)."""
    try:
        return subprocess.run([_keygen(), *args], input=data if data is not None else b"",
                              capture_output=True, check=False, timeout=60,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        raise AbgateError(f"ssh-keygen {' '.join(args[:2])} did not finish in 60 s") from None
    except OSError as exc:
        raise AbgateError(f"cannot run ssh-keygen ({exc.strerror or exc})") from None


def _last(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def _sign_bytes(key: Path, data: bytes) -> bytes:
    proc = _run(["-Y", "sign", "-f", str(key), "-n", NAMESPACE], data)
    if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
        raise UsageError(f"--sign {key}: ssh-keygen cannot sign with it ({_last(proc)}); "
                         "give an SSH private key without a passphrase, or a public key "
                         "whose private key is in ssh-agent")
    return proc.stdout


def check_key(key: Path) -> None:
    """Refuse ``key`` (exit 2) unless ssh-keygen signs with it; writes nothing."""
    if not key.is_file():
        raise UsageError(f"--sign {key}: no such key file")
    _sign_bytes(key, _PROBE)


def listed_files(directory: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every regular file under ``directory`` (symbolic
    links, temporary ``*.tmp`` files, locks and the unsigned names left out), sorted."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if path.is_symlink() or not path.is_file() or rel in NOT_SIGNED \
                or path.name == LOCK_FILE or rel.endswith(".tmp"):
            continue
        found[rel] = sha256_file(path)
    return found


def _fingerprint(key: Path) -> str | None:
    proc = _run(["-l", "-f", str(key)])
    words = proc.stdout.decode(errors="replace").split()
    return words[1] if proc.returncode == 0 and len(words) > 1 else None


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise AbgateError(f"{path}: cannot write ({exc.strerror or exc})") from exc


def sign_directory(directory: Path, key: Path) -> Path:
    """Write ``signed-files.json`` (every file's SHA-256) and its signature by ``key``;
    returns the signature's path."""
    doc = {"schema": "abgate.signed-files", "schema_version": 1, "namespace": NAMESPACE,
           "abgate_version": __version__, "key_fingerprint": _fingerprint(key),
           "signed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "files": listed_files(directory)}
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    signature = _sign_bytes(key, data)
    _write(directory / SUMS_FILE, data)
    _write(directory / SIG_FILE, signature)
    return directory / SIG_FILE


@dataclass
class SignatureCheck:
    """What :func:`check_signature` found: the signer (None: no good signature), the
    problems (a bad signature, a file changed, missing or added since signing) and the
    files whose SHA-256 matched."""

    signer: str | None = None
    problems: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.signer is not None and not self.problems


def _signer(directory: Path, allowed: Path) -> tuple[str | None, str]:
    sig, sums = directory / SIG_FILE, directory / SUMS_FILE
    proc = _run(["-Y", "find-principals", "-s", str(sig), "-f", str(allowed)])
    principals = proc.stdout.decode(errors="replace").split()
    why = ""
    if proc.returncode != 0 or not principals:
        return None, (f"{sig}: not signed by a key in {allowed} ({_last(proc)})")
    for principal in principals:
        ok = _run(["-Y", "verify", "-f", str(allowed), "-I", principal, "-n", NAMESPACE,
                   "-s", str(sig)], sums.read_bytes())
        if ok.returncode == 0:
            return principal, ""
        why = _last(ok)
    return None, f"{sig}: does not verify {SUMS_FILE} ({why})"


def _sums(directory: Path) -> dict[str, str]:
    path = directory / SUMS_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not a readable list of signed files ({exc})") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise UsageError(f"{path}: no 'files' object of SHA-256s")
    return {str(k): v for k, v in files.items()}


def check_signature(directory: Path, allowed: Path) -> SignatureCheck:
    """Verify ``directory``'s signature against ``allowed`` (an allowed_signers file) and
    every listed file's SHA-256; a file not listed (but the unsigned names) is a problem."""
    if not allowed.is_file():
        raise UsageError(f"--allowed-signers {allowed}: no such file")
    found = SignatureCheck()
    if not (directory / SIG_FILE).is_file() or not (directory / SUMS_FILE).is_file():
        found.problems.append(f"{directory}: not signed (no {SUMS_FILE} and {SIG_FILE})")
        return found
    found.signer, why = _signer(directory, allowed)
    if found.signer is None:
        found.problems.append(why)
    signed, now = _sums(directory), listed_files(directory)
    for rel, digest in signed.items():
        if rel not in now:
            found.problems.append(f"{directory / rel}: signed, now missing")
        elif now[rel] != digest:
            found.problems.append(f"{directory / rel}: changed since it was signed")
        else:
            found.matched.append(rel)
    found.problems += [f"{directory / rel}: added after signing (not covered)"
                       for rel in now if rel not in signed]
    return found
