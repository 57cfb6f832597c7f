"""Secrets in URLs and in what servers echo back (issue 26, item 4): URL credentials
wherever a URL appears (a ``key=value`` word, a password holding a raw ``@``, query
parameters with secret names), and the known secret values (the ``--api-key-env``
key, whatever its variable is called) scrubbed from every record, sample errors
included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abgate.redact import REDACTED, redact, redact_argv, redact_text
from tests.conftest import abgate
from tests.support.fault_server import FaultServer

PASSWORD = "s3cr@tpw"  # a raw '@' in it


@pytest.mark.parametrize("url", [
    f"http://user:{PASSWORD}@host:8000/v1",
    f"https://user:{PASSWORD}@host/?token=abc123xyz",
    "http://host:8000/v1?api_key=abc123xyz&model=m",
])
def test_url_credentials_and_secret_query_parameters(url: str) -> None:
    for shown in (redact_text(url), redact({"endpoint": url})["endpoint"],
                  redact({"endpoints": [url]})["endpoints"][0],
                  redact_argv([f"endpoint={url}"])[0], redact_argv([f"--endpoint={url}"])[0]):
        assert PASSWORD not in shown and "tpw" not in shown and "abc123xyz" not in shown, shown
        assert "host" in shown, shown


def test_harmless_query_parameters_are_kept() -> None:
    assert redact_text("http://host/v1?model=m&n=2") == "http://host/v1?model=m&n=2"


def test_a_key_word_holding_a_url_keeps_nothing_secret() -> None:
    """``base_url=http://u:p@h/?token=x`` as one argv word (the issue's case)."""
    word = f"base_url=http://user:{PASSWORD}@host/?token=abc123xyz"
    shown = redact_argv(["server", word])[1]
    assert shown == f"base_url=http://{REDACTED}@host/?token={REDACTED}", shown


def test_echoed_api_key_never_reaches_a_record(tmp_path: Path) -> None:
    """A server that quotes the refused key in its 401 body: the key (from a variable
    whose name says nothing) is in no file abgate writes, nor on stderr."""
    key = "plainvalue-6d41a7f0c9"
    out = tmp_path / "R"
    with FaultServer(default="401echo") as fs:
        r = abgate("run", "--engine", "openai", "--endpoint", fs.url, "--api-key-env",
                   "MY_SERVICE_VAR", "--suite", "synthetic", "--limit", "2", "--max-tokens",
                   "4", "-o", str(out), env={"MY_SERVICE_VAR": key}, timeout=300)
    assert r.returncode == 1, r.stderr  # every sample failed: 401
    assert "HTTP 401" in r.stderr and key not in r.stderr and key not in r.stdout
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "samples.jsonl" for p in files)
    for p in files:
        assert key not in p.read_text(errors="replace"), p
    assert REDACTED in (out / "samples.jsonl").read_text()


def test_url_password_with_at_is_redacted_in_every_file(tmp_path: Path) -> None:
    out = tmp_path / "R"
    with FaultServer() as fs:
        url = fs.url.replace("http://", f"http://user:{PASSWORD}@")
        r = abgate("run", "--engine", "openai", "--endpoint", url, "--suite", "synthetic",
                   "--limit", "1", "--max-tokens", "4", "-o", str(out), timeout=300,
                   env={"NO_PROXY": "*", **os.environ})
    for text in (r.stderr, r.stdout, *(p.read_text(errors="replace")
                                       for p in out.rglob("*") if p.is_file())):
        assert PASSWORD not in text and "tpw@" not in text
    assert (out / "run.json").exists(), r.stderr
