"""The generic suite (issue 34 item 3): a user's JSONL of prompts and text answers,
scored by exact match or a regex; every bad row is one line naming file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.engines.base import GenerationResult
from abgate.errors import UsageError
from abgate.runner.samples import build_sample
from abgate.suites import load_suite
from abgate.suites.prompts import PromptConfig, build_messages
from tests.support.fake import cli


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in rows))
    return path


def _result(text: str, finish: str = "stop") -> GenerationResult:
    return GenerationResult(request_id="r", text=text, finish_reason=finish,  # type: ignore[arg-type]
                            prompt_tokens=3, output_tokens=len(text.split()),
                            output_token_ids=None, t_submit=0.0, t_first_token=0.1,
                            t_last_token=0.2)


def test_rows_load_with_ids_and_scorers(tmp_path: Path) -> None:
    data = _write(tmp_path / "qa.jsonl", [
        {"prompt": "Capital of France? One word.", "answer": "Paris"},
        {"id": "prime", "question": "A prime above 10?", "answer": r"\b1[1379]\b",
         "scorer": "regex"}])
    suite = load_suite("jsonl", str(data))
    assert suite.name == "jsonl" and suite.data_sha256 and len(suite.items) == 2
    first, second = suite.items
    assert first.id.startswith("jsonl-") and second.id == "prime"
    assert first.scorer is not None and first.scorer.kind == "exact"
    assert second.scorer is not None and second.scorer.kind == "regex"
    # the prompt is sent as written: no math instruction around it
    messages = build_messages(first, PromptConfig(), ())
    assert messages[-1]["content"] == "Capital of France? One word."


def test_exact_and_regex_scoring_in_samples(tmp_path: Path) -> None:
    data = _write(tmp_path / "qa.jsonl", [
        {"id": "a", "prompt": "Capital of France?", "answer": "Paris"},
        {"id": "b", "prompt": "A prime above 10?", "answer": r"\b1[1379]\b",
         "scorer": "regex"}])
    exact, regex = load_suite("jsonl", str(data)).items
    msgs = [{"role": "user", "content": "x"}]
    right = build_sample(exact, 0, msgs, _result("  Paris\n"))
    wrong = build_sample(exact, 0, msgs, _result("Paris, France"))
    assert right.correct is True and wrong.correct is False
    assert right.reference == "Paris" and not wrong.health.invalid
    assert right.extracted is not None and right.extracted.source == "exact"
    assert wrong.extracted is not None and wrong.extracted.reason == "no_match"
    hit = build_sample(regex, 0, msgs, _result("I pick 13."))
    miss = build_sample(regex, 0, msgs, _result("I pick 12."))
    empty = build_sample(regex, 0, msgs, _result(""))
    assert hit.correct is True and hit.extracted is not None and hit.extracted.span == "13"
    assert miss.correct is False and empty.correct is False and empty.health.invalid
    errored = build_sample(regex, 0, msgs, _result("", finish="error"))
    assert errored.correct is None and not errored.health.invalid


@pytest.mark.parametrize(("rows", "message"), [
    ([{"prompt": "p", "answer": "a"}, "{not json"], r"qa.jsonl:2: "),
    ([{"prompt": "p"}], r"qa.jsonl:1: missing key 'answer'"),
    ([{"answer": "a"}], r"qa.jsonl:1: missing key 'question'|qa.jsonl:1: missing key 'prompt'"),
    ([{"prompt": "p", "answer": 3}], r"qa.jsonl:1: 'answer' must be a non-empty string"),
    ([{"prompt": "p", "answr": "a"}], r"qa.jsonl:1: unknown key 'answr' \(did you mean"),
    ([{"prompt": "p", "answer": "(", "scorer": "regex"}],
     r"qa.jsonl:1: answer is not a valid regex"),
    ([{"prompt": "p", "answer": "a", "scorer": "exakt"}],
     r"qa.jsonl:1: scorer 'exakt' is not one of exact, regex \(did you mean 'exact'"),
    ([{"id": "x", "prompt": "p", "answer": "a"}, {"id": "x", "prompt": "q", "answer": "b"}],
     r"qa.jsonl:2: duplicate id 'x' \(first on line 1\)"),
    ([], r"qa.jsonl: no items"),
])
def test_bad_rows_name_file_and_line(tmp_path: Path, rows: list[object],
                                     message: str) -> None:
    data = _write(tmp_path / "qa.jsonl", rows)
    with pytest.raises(UsageError, match=message):
        load_suite("jsonl", str(data))


def test_missing_data_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs --data"):
        load_suite("jsonl", None)
    with pytest.raises(UsageError, match="data file not found"):
        load_suite("jsonl", str(tmp_path / "nope.jsonl"))


def test_a_run_on_the_generic_suite_scores_its_answers(tmp_path: Path) -> None:
    """The fake engine answers ``The answer is N.`` with the prompt's last number."""
    data = _write(tmp_path / "qa.jsonl", [
        {"id": "e", "prompt": "Say 7.", "answer": "The answer is 7."},
        {"id": "r", "prompt": "Say 8.", "answer": r"answer is 8\b", "scorer": "regex"},
        {"id": "w", "prompt": "Say 9.", "answer": "nine"}])
    result = cli("run", "--engine", "fake", "--suite", "jsonl", "--data", str(data),
                 "--max-tokens", "24", "--seeds", "0", "-o", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr + result.stdout
    lines = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    scored = {s["item_id"]: s["correct"] for s in lines if not s.get("warmup")}
    assert scored == {"e": True, "r": True, "w": False}
    bad = _write(tmp_path / "bad.jsonl", [{"prompt": "p", "answer": "a", "scorer": "re"}])
    out = tmp_path / "bad-run"
    refused = cli("run", "--engine", "fake", "--suite", "jsonl", "--data", str(bad),
                  "-o", str(out))
    assert refused.returncode == 2 and "bad.jsonl:1: scorer 're'" in refused.stderr
    assert not out.exists()
