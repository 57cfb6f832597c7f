"""Signatures over record directories (issue 35, item 6): ``--sign KEY`` on
``baseline record``, ``ab`` and ``decide``, ``abgate verify DIR --allowed-signers``
for every record kind, and ``attach --require-signature``. Real ssh-keygen keys,
generated here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake import ACCEPT_ARGS, cli, experiment, fake_run
from tests.support.records import changed, edit_sealed

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                reason="ssh-keygen (openssh-client) is not installed")

SIGNED, SIG = "signed-files.json", "signed-files.json.sig"


def _key(tmp_path: Path, name: str) -> Path:
    key = tmp_path / "keys" / name
    key.parent.mkdir(exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                    str(key)], check=True, capture_output=True)
    return key


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """alice's key (allowed) and the allowed_signers file naming her only."""
    alice = _key(tmp_path, "alice")
    allowed = tmp_path / "keys" / "allowed_signers"
    allowed.write_text(f'alice@example.com namespaces="abgate" '
                       f'{alice.with_suffix(".pub").read_text()}')
    return alice, allowed


def _baseline(out: Path, *extra: str) -> object:
    return cli("baseline", "record", "--engine", "fake", "--input-len", "32", "--output-len",
               "8", "--repeats", "1", "--no-probes", "-o", str(out), *extra)


def _verify(directory: Path, allowed: Path) -> tuple[int, str]:
    r = cli("verify", str(directory), "--allowed-signers", str(allowed))
    return r.returncode, r.stdout + r.stderr


def test_a_signed_baseline_verifies_and_a_resealed_edit_does_not(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, allowed = keys
    out = tmp_path / "B"
    r = _baseline(out, "--sign", str(alice))
    assert getattr(r, "returncode", None) == 0, getattr(r, "stderr", "")
    assert (out / SIG).read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    assert "baseline.json" in json.loads((out / SIGNED).read_text())["files"]
    code, text = _verify(out, allowed)
    assert code == 0 and "good, by 'alice@example.com'" in text, text
    # an edit re-sealed: the seal holds (anyone can re-seal), the signature does not
    def one_token_changed(doc: Any) -> Any:
        case = doc.cases[0]
        ids = [case.output_token_ids[0] + 1, *case.output_token_ids[1:]]
        return doc.model_copy(update={"cases": [changed(case, output_token_ids=ids),
                                                *doc.cases[1:]]})

    edit_sealed(out / "baseline.json", one_token_changed)
    code, text = _verify(out, allowed)
    assert code == 1 and "seal verified" in text, text
    assert "baseline.json: changed since it was signed" in text


def test_a_rewritten_file_list_or_another_key_is_refused(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, allowed = keys
    out = tmp_path / "B"
    _baseline(out, "--sign", str(alice))
    listed = json.loads((out / SIGNED).read_text())
    (out / "baseline.json").write_text((out / "baseline.json").read_text() + " ")
    listed["files"]["baseline.json"] = "0" * 64  # the list edited to match: not signed
    (out / SIGNED).write_text(json.dumps(listed))
    code, text = _verify(out, allowed)
    assert code == 1 and "does not verify signed-files.json" in text, text
    mallory = _key(tmp_path, "mallory")
    assert cli("sign", str(out), "--key", str(mallory)).returncode == 0
    code, text = _verify(out, allowed)
    assert code == 1 and "not signed by a key in" in text, text


def test_a_bad_sign_key_exits_2_with_nothing_written(tmp_path: Path) -> None:
    garbage = tmp_path / "not-a-key"
    garbage.write_text("hello\n")
    locked = tmp_path / "locked"  # a passphrase: never prompted for, refused
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f",
                    str(locked)], check=True, capture_output=True)
    for key in (tmp_path / "missing", garbage, locked):
        r = _baseline(tmp_path / "B", "--sign", str(key))
        err = getattr(r, "stderr", "")
        assert getattr(r, "returncode", None) == 2 and f"--sign {key}" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "B").exists()


def test_ab_and_decide_sign_every_arm_and_decision(tmp_path: Path,
                                                   keys: tuple[Path, Path]) -> None:
    alice, allowed = keys
    out = tmp_path / "ab"
    r = cli("ab", str(experiment(tmp_path / "e.toml", ACCEPT_ARGS)), "-o", str(out),
            "--sign", str(alice))
    assert r.returncode == 0, r.stdout + r.stderr
    listed = json.loads((out / SIGNED).read_text())["files"]
    assert {"ab.json", "arms/a/run.json", "arms/b/samples.jsonl"} <= set(listed)
    code, text = _verify(out, allowed)
    assert code == 0 and "'ab-arm' record" in text and "'ab' record" in text, text
    (out / SIG).unlink()  # a complete A/B resumed with --sign: signed as it is
    again = cli("ab", "--resume", str(out), "--sign", str(alice))
    assert again.returncode == 0 and (out / SIG).is_file(), again.stderr
    assert _verify(out, allowed)[0] == 0
    r = cli("decide", str(out), "--decision", "keep-default-on", "--why", "accepted",
            "--sign", str(alice))
    assert r.returncode == 0, r.stderr
    assert "decisions.jsonl" in json.loads((out / SIGNED).read_text())["files"]
    code, text = _verify(out, allowed)
    assert code == 0 and "every line a decision record" in text, text
    samples = out / "arms" / "b" / "samples.jsonl"
    samples.write_text(samples.read_text().replace('"correct": true', '"correct": false', 1))
    code, text = _verify(out, allowed)
    assert code == 1 and "arms/b/samples.jsonl: changed since it was signed" in text, text
    bad = cli("decide", str(out), "--decision", "revert", "--why", "x", "--sign",
              str(tmp_path / "missing"))
    assert bad.returncode == 2 and "--sign" in bad.stderr
    assert len((out / "decisions.jsonl").read_text().splitlines()) == 1  # nothing written


def test_verify_without_a_signature_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert fake_run(out).returncode == 0
    r = cli("verify", str(out))
    assert r.returncode == 0 and "not signed" in r.stdout and "'run' record" in r.stdout
    assert cli("verify", str(tmp_path / "nowhere")).returncode == 2
    bad = cli("verify", str(out), "--allowed-signers", str(tmp_path / "none"))
    assert bad.returncode == 2 and "--allowed-signers" in bad.stderr
