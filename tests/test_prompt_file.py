"""``--prompt-file``: your own fixed prompt (token IDs as JSON, or text), identified by
its token SHA-256; the context boundary n_ctx-1 + 1 (one output token: prefill and
TTFT only, decode undefined)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from abgate.bench.prompt_file import read_prompt_file
from abgate.errors import UsageError
from tests.support.fake import cli

IDS = list(range(100, 170))  # 70 token IDs, all inside the fake's 258-token vocabulary
FLAGS = ["--engine", "fake", "--repeats", "1", "--warmup", "0", "--peak-bw", "10",
         "--engine-arg", "n_ctx=64"]


def sha(ids: list[int]) -> str:
    """The prompt identity, computed here as another tool would: SHA-256 of the
    comma-joined decimal IDs."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def test_prompt_file_forms(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(IDS))
    (tmp_path / "b.json").write_text(json.dumps({"token_ids": IDS[:3]}))
    (tmp_path / "c.txt").write_text("The harbour keeper counted the boats.\n")
    assert read_prompt_file(str(tmp_path / "a.json"))["token_ids"] == IDS
    assert read_prompt_file(str(tmp_path / "b.json"))["token_ids"] == IDS[:3]
    text = read_prompt_file(str(tmp_path / "c.txt"))
    assert text["text"].startswith("The harbour") and len(text["file_sha256"]) == 64


@pytest.mark.parametrize(("content", "message"), [
    ("[1, 2,\n 3,]", r"bad\.json:2: not valid JSON"),
    ('[1, "two", 3]', r"token_ids\[1\] is 'two'"),
    ("[1, -4]", r"token_ids\[1\] is -4"),
    ("[]", "non-empty JSON list"),
    ('{"ids": [1]}', "non-empty JSON list"),
])
def test_a_bad_prompt_file_is_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        read_prompt_file(str(path))


def test_prompt_file_sha_matched_and_mismatched(tmp_path: Path) -> None:
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(IDS[:20]))
    out = tmp_path / "B"
    r = cli("bench", "--prompt-file", str(ids), "--output-len", "2", *FLAGS,
               "--expect-prompt-sha", sha(IDS[:20]), "-o", str(out))
    assert r.returncode == 0, r.stderr
    (case,) = json.loads((out / "summary.json").read_text())["cases"]
    assert case["prompt_sha256"] == sha(IDS[:20]) and case["prompt_tokens"] == 20
    other = tmp_path / "other"
    r = cli("bench", "--prompt-file", str(ids), "--output-len", "2", *FLAGS,
               "--expect-prompt-sha", sha(IDS[:19]), "-o", str(other))
    assert r.returncode == 2 and "expected" in r.stderr and not other.exists()
    # the first N tokens of the file, by --input-len
    r = cli("bench", "--prompt-file", str(ids), "--input-len", "8", "--output-len", "2",
               *FLAGS, "--expect-prompt-sha", sha(IDS[:8]), "-o", str(tmp_path / "C"))
    assert r.returncode == 0, r.stderr
    text = tmp_path / "prompt.txt"  # text: tokenized by the engine, no special tokens
    text.write_text("The harbour keeper counted the boats.")
    r = cli("bench", "--prompt-file", str(text), "--output-len", "2", *FLAGS,
               "-o", str(tmp_path / "T"))
    assert r.returncode == 0, r.stderr
    (case,) = json.loads((tmp_path / "T" / "summary.json").read_text())["cases"]
    assert case["prompt_tokens"] == case["input_len"] == len(text.read_bytes())


def test_context_boundary_one_output_token(tmp_path: Path) -> None:
    """n_ctx - 1 prompt tokens + 1 output token fill the context exactly: prefill and TTFT
    are measured, steady decode and TPOT are undefined; one more token is refused."""
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(IDS))  # 70 tokens: longer than the 64-token context
    out = tmp_path / "B"
    r = cli("bench", "--prompt-file", str(ids), "--input-len", "max", "--output-len", "1",
               *FLAGS, "--expect-prompt-sha", sha(IDS[:63]), "-o", str(out))
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    (case,) = summary["cases"]
    assert (case["input_len"], case["output_len"], case["prompt_tokens"]) == (63, 1, 63)
    assert any(x.startswith("output quality") for x in summary["not_certified"])
    assert "This does not certify:" in r.stdout
    assert case["speed"]["prefill_tps"]["median"] > 0 and case["speed"]["ttft_s"]["n"] == 1
    assert case["speed"]["steady_decode_tps"] == {"n": 0}
    assert case["speed"]["tpot_ms"] == {"n": 0}
    r = cli("bench", "--prompt-file", str(ids), "--input-len", "64", "--output-len", "1",
               *FLAGS, "-o", str(tmp_path / "C"))
    assert r.returncode == 2 and "exceeds the context (n_ctx=64) by 1" in r.stderr


def test_baseline_of_a_prompt_file_at_the_boundary(tmp_path: Path) -> None:
    """Recorded from a prompt file, checked without it (the content is in the sealed
    record); a one-token case's speed is its prefill."""
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(IDS))
    base = tmp_path / "BL"
    r = cli("baseline", "record", "--prompt-file", str(ids), "--input-len", "max",
               "--output-len", "1", "--repeats", "2", "--warmup", "1", "--no-probes",
               "--engine-arg", "n_ctx=64", "--engine", "fake", "-o", str(base))
    assert r.returncode == 0, r.stderr
    ids.unlink()
    report = tmp_path / "check.json"
    r = cli("baseline", "check", str(base), "--tolerance", "1", "--json", str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads(report.read_text())["cases"]
    assert row["prompt_sha256"] == sha(IDS[:63]) and row["tokens_match"]
    assert row["repeats"]["summary"] == "2/2 repeats and the warm-up match"
    assert row["speed"]["metric"] == "prefill_tps" and row["speed"]["current_median"] > 0
