"""Token-shaped secrets are redacted by value whatever their variable's name, in
records, env snapshots, logs and sample texts; a model's ordinary words are kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.records.samples import Sample
from abgate.redact import REDACTED, redact, redact_env, redact_text
from abgate.runner.records import SampleWriter

TOKENS = {
    "ghp": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "gho": "gho_" + "a1" * 18, "ghu": "ghu_" + "B2" * 18, "ghs": "ghs_" + "c3" * 18,
    "ghr": "ghr_" + "D4" * 18,
    "github_pat": "github_pat_11ABCDEFG0" + "x9" * 10 + "_" + "Y8" * 29,
    "xoxb": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxp": "xoxp-123456789012-123456789012-123456789012-abcdef0123456789abcdef01",
    "slack_webhook": "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/Xy12Ab34Cd56Ef78Gh90",
    "sk": "sk-" + "Ab1" * 16, "sk_proj": "sk-proj-" + "Ab1_Cd2-" * 10,
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "akia": "AKIAIOSFODNN7EXAMPLE", "asia": "ASIAIOSFODNN7EXAMPL3",
    "glpat": "glpat-" + "xY1_" * 5,
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
           "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_token_under_a_harmless_name_is_redacted(kind: str) -> None:
    token = TOKENS[kind]
    assert token not in redact_env({"NOTES": token, "MODEL_DIR": f"/m?x={token}"}).values()
    assert token not in json.dumps(redact({"description": f"see {token} here",
                                           "argv": ["serve", f"--model={token}", token]}))
    assert token not in redact_text(f"launch: serve --model {token} --port 1")
    assert REDACTED in redact_text(f"harmless={token}")


def test_sample_texts_lose_tokens_and_keep_words(tmp_path: Path) -> None:
    words = ("use sk-learn-style-pipelines and hf_transformers_models_here; "
             "the GHP_ value is ghp_documentation_page_example_words; pass: 3")
    secret = TOKENS["sk_proj"]
    path = tmp_path / "samples.jsonl"
    with SampleWriter(path) as w:
        w.append(Sample.model_validate(
            {"key": "k", "prompt": {"messages": [{"role": "user",
                                                  "content": f"my key {secret}"}]},
             "output": {"text": f"{words} {TOKENS['hf']}", "token_ids": [1, 2]}}))
    line = json.loads(path.read_text())
    assert secret not in path.read_text() and TOKENS["hf"] not in path.read_text()
    assert line["output"]["text"] == f"{words} {REDACTED}"
    assert line["prompt"]["messages"][0]["content"] == f"my key {REDACTED}"
    assert line["output"]["token_ids"] == [1, 2]
