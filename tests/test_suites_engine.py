"""Several suites, one verdict, on the real engine (issue 34 item 3): the README's no-op
(llama.cpp reading the model into memory instead of mapping it) gated over the
synthetic suite and a user's JSONL, every output token-identical; the verdict is Holm's
over both suites' gates (the workflow and REJECTs: tests/test_suites_holm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, abgate, toml_engine_args

EXAMPLE = REPO / "examples" / "smollm2-no-op.toml"


@pytest.mark.engine
@pytest.mark.cost(14)
def test_two_suites_on_llamacpp(tmp_path: Path) -> None:
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i} plus {i}? "
                                      "Answer with the number only.",
                                      "answer": rf"\b{2 * i}\b", "scorer": "regex"}) + "\n"
                          for i in range(1, 5)))
    text = EXAMPLE.read_text()
    shared = "engine_args = { n_ctx = 1024, n_threads = 1, n_threads_batch = 1 }"
    assert text.count(shared) == 1
    text = text.replace(shared, "engine_args = " + toml_engine_args(
        {"n_ctx": 1024, "n_threads": 1, "n_threads_batch": 1}))
    exp = tmp_path / "suites.toml"
    exp.write_text(text + f"""
[evidence]
agreement = false
probes = false

[suites.synthetic]
suite = "synthetic"
difficulty = "trivial"
limit = 4

[suites.qa]
suite = "jsonl"
data = "{qa}"
max_tokens = 16
""")
    out = tmp_path / "out"
    r = abgate("ab", str(exp), "-o", str(out), "--warmup", "1", "--max-tokens", "24")
    assert r.returncode == 3, r.stdout + r.stderr  # 4 items a suite cannot decide
    verdict = json.loads((out / "suites.json").read_text())["verdict"]
    assert verdict["decision"] == "INCONCLUSIVE"
    assert set(verdict["suites"]) == {"synthetic/no-mmap", "qa/no-mmap"}
    assert "Holm step-down" in verdict["method"] and verdict["n_tests"] >= 2
    assert not [g for g in verdict["gates"] if g["outcome"] == "fail"]
    for name, n in (("synthetic", 4), ("qa", 4)):
        comp = json.loads((out / "suites" / name / "comparison.json").read_text())
        c = comp["comparisons"]["no-mmap"]["comparison"]
        assert c["n_pairs"] == n and c["diagnostics"]["identical_outputs"]["text"] == f"{n}/{n}"
    qa_samples = [json.loads(x) for x in
                  (out / "suites" / "qa" / "arms" / "mmap" / "samples.jsonl").read_text()
                  .splitlines()]
    scored = [s for s in qa_samples if not s["warmup"]]
    assert all(s["extracted"]["source"] == "regex" for s in scored)
    assert all(s["prompt"]["messages"][-1]["content"].startswith("What is") for s in scored)
