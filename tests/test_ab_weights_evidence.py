"""``[evidence] weights = true`` (issue 37, item 1 in an A/B): ``abgate ab`` reads each
arm's weights right after its load and writes ``weights-diff-<candidate>.json``, the
layer x projection table of the arms' actual models, which the report shows.

Real engine: llama.cpp on SmolLM2 (Q4_1) against a copy of the same file (another path,
the same SHA-256): every tensor compared, all exact, and each of the two files hashed
once in the whole A/B (its spec, every load's check and the weights diff share the
hash; was tests/test_engine_session.py's own llama.cpp A/B of the same two files). A
served arm is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import abgate.identity as identity
from abgate.identity import sha256_file
from tests.support.fake import cli
from tests.test_ab_declared import experiment, write

WEIGHTS = "[evidence]\nweights = true\n"


def _with_weights(text: str) -> str:
    return text.replace("[evidence]\n", WEIGHTS, 1)


def test_a_served_arm_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    text = _with_weights(experiment({}, 'engine = "openai"\n'
                                        'engine_options = { endpoints = ["http://127.0.0.1:9"] }'))
    out = tmp_path / "AB"
    r = cli("ab", str(write(tmp_path, text)), "-o", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot expose its loaded weights" in r.stderr and "'cand'" in r.stderr
    assert not out.exists()


@pytest.mark.engine
@pytest.mark.cost(11)
def test_ab_writes_the_runtime_weights_diff_of_its_arms(
        tmp_path: Path, model_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The A/B through the CLI in this process, so that every hashing is seen."""
    pytest.importorskip("gguf")
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(model_path, copy)
    calls: list[str] = []

    def counting(path: Path) -> str:
        calls.append(os.path.realpath(path))
        return sha256_file(path)

    monkeypatch.setattr(identity, "sha256_file", counting)
    identity.DEFAULT_CACHE.clear()  # and no digests from other processes: each file read once
    monkeypatch.setattr(identity.DEFAULT_CACHE, "_store", None)
    text = _with_weights(experiment({"model": model_path}, f"model = {json.dumps(str(copy))}"))
    out = tmp_path / "AB"
    r = cli("ab", str(write(tmp_path, text)), "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr  # the verdict (3: inconclusive) aside
    for model in (os.path.realpath(model_path), os.path.realpath(copy)):
        assert calls.count(model) == 1, (model, calls.count(model))
    doc = json.loads((out / "weights-diff-cand.json").read_text())
    sha = sha256_file(Path(model_path))
    assert doc["source"] == "runtime" and doc["ref"]["sha256"] == doc["other"]["sha256"] == sha
    assert doc["ref"]["model"] == Path(model_path).name and doc["other"]["model"] == "copy.gguf"
    assert doc["ref"]["engine"] == "llamacpp" and doc["ref"]["config_digest"]
    assert doc["summary"]["n_compared"] == doc["summary"]["n_tensors_ref"] > 100
    assert doc["summary"]["overall"]["max_rel_l2"] == 0.0
    assert any(t["kind"] == "attn_q" and t["layer"] == 0 for t in doc["tensors"])
    assert not (out / "weights-diff-base.json").exists()
    report = (out / "report.md").read_text()
    assert "Weights: weights-diff-cand" in report and "not this A/B's" not in report
    assert str(tmp_path) not in json.dumps(doc["ref"]) + json.dumps(doc["other"])
