"""Hostile JSON anywhere abgate reads it (issue 35, item 8): a 5,000-digit number, a
value of the wrong type, 100,000 levels of nesting, in an lm-eval samples file, a vLLM
bench result, a prompt file, a record or a samples line, an engine-arg value, a
manifest, ``abgate extract``'s stdin. Each is one line naming the file (and the line),
exit 2, never a traceback, and nothing written. The guarded reader itself
(:mod:`abgate.safejson`) is fuzzed against :func:`json.loads`."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abgate.engines.args import parse_pairs
from abgate.errors import AbgateError, UsageError
from abgate.provenance.loading import read_manifest
from abgate.safejson import MAX_DEPTH, MAX_DIGITS, BadJson, parse
from tests.support.fake import Result, cli, fake_run

DEEP = "[" * 100_000 + "]" * 100_000
DIGITS = "9" * 5000
LMEVAL = "samples_gsm8k_2024-01-01T00-00-00.000000.jsonl"
OFF = {"ABGATE_LEDGER": "off"}  # set for the call only (a global --ledger would leak)


def _lmeval_line(doc_id: Any = 0) -> str:
    return json.dumps({"doc_id": doc_id, "doc": {"question": "q", "answer": "#### 3"},
                       "resps": [["The answer is 3."]], "filtered_resps": ["3"],
                       "filter": "strict-match", "metrics": ["exact_match"],
                       "exact_match": 1.0})


def _vllm(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"backend": "vllm", "completed": 2, "num_prompts": 2,
                           "input_lens": [10, 12], "output_lens": [5, 6],
                           "ttfts": [0.02, 0.03], "itls": [[0.01] * 4, [0.01] * 5],
                           "errors": ["", ""], "generated_texts": ["The answer is 3.", "4"]}
    doc.update(changes)
    return doc


def _refused(r: Result, *needles: str) -> None:
    """Exit 2, one line on stderr, no traceback, each needle in it."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


LMEVAL_CASES = {
    "5000-digit doc_id": (_lmeval_line().replace('"doc_id": 0', f'"doc_id": {DIGITS}'),
                          ":1: a number of 5000 digits"),
    "list doc_id": (_lmeval_line([1, 2]), ":1: doc_id is a list, not an integer or a string"),
    "bool doc_id": (_lmeval_line(True), ":1: doc_id is a boolean"),
    "object arguments": (_lmeval_line().replace('"doc":', '"arguments": [1], "doc":'),
                         ":1: arguments is a list, not an object"),
    "deep second line": (_lmeval_line() + "\n" + DEEP, ":2: JSON nested deeper than"),
    "digits on the second line": (_lmeval_line() + "\n" + f'{{"doc_id": 1, "resps": [{DIGITS}]}}',
                                  ":2: a number of 5000 digits"),
}


@pytest.mark.parametrize("command", ["ledger add", "compare"])
@pytest.mark.parametrize("case", sorted(LMEVAL_CASES))
def test_hostile_lmeval_file_is_one_line(tmp_path: Path, command: str, case: str) -> None:
    text, needle = LMEVAL_CASES[case]
    path = tmp_path / LMEVAL
    path.write_text(text + "\n")
    ledger = tmp_path / "ledger.sqlite"
    args = ["ledger", "add", str(path)] if command == "ledger add" else [
        "compare", str(path), str(path)]
    _refused(cli(*args, env={"ABGATE_LEDGER": str(ledger)}), str(path), needle)
    assert not ledger.exists()  # nothing written, not even an empty ledger
    assert sorted(p.name for p in tmp_path.iterdir()) == [LMEVAL]


VLLM_CASES = {
    "100000-deep": ('{"ttfts": ' + DEEP + "}", "JSON nested deeper than 100 levels"),
    "5000-digit count": (json.dumps(_vllm()).replace("[10, 12]", f"[{DIGITS}, 12]"),
                         "a number of 5000 digits"),
    "string count": (json.dumps(_vllm(input_lens=["ten", 12])),
                     "input_lens[0] is 'ten', not a token count"),
    "list count": (json.dumps(_vllm(output_lens=[[5], 6])),
                   "output_lens[0] is a list, not a token count"),
    "number itls": (json.dumps(_vllm(itls=[0.01, [0.01]])),
                    "itls[0] is 0.01, not a list of inter-token gaps"),
    "object error": (json.dumps(_vllm(errors=[{"x": 1}, ""])),
                     "errors[0] is an object, not an error string"),
}


@pytest.mark.parametrize("command", ["ledger add", "compare"])
@pytest.mark.parametrize("case", sorted(VLLM_CASES))
def test_hostile_vllm_bench_json_is_one_line(tmp_path: Path, command: str, case: str) -> None:
    text, needle = VLLM_CASES[case]
    path = tmp_path / "bench.json"
    path.write_text(text)
    ledger = tmp_path / "ledger.sqlite"
    args = ["ledger", "add", str(path)] if command == "ledger add" else [
        "compare", str(path), str(path)]
    _refused(cli(*args, env={"ABGATE_LEDGER": str(ledger)}), str(path), needle)
    assert not ledger.exists()


def test_vllm_bench_with_a_huge_or_nan_time_is_read(tmp_path: Path) -> None:
    """A time past a float (a 400-digit integer) or NaN is no measurement, not a crash."""
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_vllm(request_rate=float("nan"))).replace(
        '"ttfts": [0.02, 0.03]', f'"ttfts": [{"9" * 400}, NaN]'))
    r = cli("ledger", "add", str(path), env={"ABGATE_LEDGER": str(tmp_path / "ledger.sqlite")})
    assert r.returncode == 0, r.stderr
    assert "vllm-bench" in r.stdout


PROMPT_CASES = {
    "5000-digit token ID": (f"[1, {DIGITS}]", ":1: a number of 5000 digits"),
    "100000-deep": (DEEP, "JSON nested deeper than 100 levels"),
    "deep token_ids object": ('{"token_ids": ' + DEEP + "}", "JSON nested deeper than"),
    "token ID past int32": ("[1, 2147483648]",
                            "token_ids[1] is 2147483648, not an integer from 0 to 2147483647"),
    "999-digit token ID": (f"[1, {'7' * 999}]", "token_ids[1] is 777"),
}


@pytest.mark.parametrize("case", sorted(PROMPT_CASES))
def test_hostile_prompt_file_is_one_line_before_anything(tmp_path: Path, case: str) -> None:
    text, needle = PROMPT_CASES[case]
    path = tmp_path / "prompt.json"
    path.write_text(text)
    out = tmp_path / "bench"
    r = cli("bench", "--engine", "fake", "--prompt-file", str(path), "-o", str(out),
            env=OFF)
    _refused(r, f"--prompt-file {path}", needle)
    assert not out.exists()


def test_a_prompt_file_past_its_size_is_refused_unread(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from abgate.bench import prompt_file

    monkeypatch.setattr(prompt_file, "MAX_PROMPT_BYTES", 100)
    path = tmp_path / "prompt.txt"
    path.write_text("word " * 100)
    with pytest.raises(UsageError, match=r"prompt\.txt: 500 bytes, more than the 100 bytes"):
        prompt_file.read_prompt_file(str(path))


@pytest.mark.parametrize("hostile", ["deep", "digits"])
def test_hostile_record_and_samples_line_are_one_line(tmp_path: Path, hostile: str) -> None:
    run = tmp_path / "run"
    assert fake_run(run, limit=3, seeds="0").returncode == 0
    lines = (run / "samples.jsonl").read_text().splitlines()
    bad = DEEP if hostile == "deep" else lines[1].replace('"seed": 0', f'"seed": {DIGITS}')
    (run / "samples.jsonl").write_text("\n".join([lines[0], bad, lines[2]]) + "\n")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    _refused(cli("compare", str(run), str(run), env=OFF), "samples.jsonl:2")
    doc = (run / "run.json").read_text()
    (run / "run.json").write_text(DEEP if hostile == "deep" else re.sub(
        r'"schema_version": \d+', f'"schema_version": {DIGITS}', doc, count=1))
    needle = "nested deeper" if hostile == "deep" else "a number of 5000 digits"
    _refused(cli("compare", str(run), str(run), env=OFF), "run.json", needle)
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert set(after) == set(before)
    assert all(after[p] == before[p] for p in before if p.name != "run.json")


@pytest.mark.parametrize("value", ["[" + DIGITS + "]", "[" * 5000 + "]" * 5000])
def test_hostile_engine_arg_value_is_one_line(value: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_pairs([f"x={value}"], "--engine-arg")
    assert "\n" not in str(err.value) and "does not parse" in str(err.value)


@pytest.mark.parametrize("text", [DEEP, '{"schema": ' + DIGITS + "}"])
def test_hostile_manifest_is_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(AbgateError) as err:
        read_manifest(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_extract_stdin_deep_line_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO('{"text": "3"}\n' + DEEP + "\n"))
    r = cli("extract", "--jsonl")
    _refused(r, "stdin line 2", "nested deeper")


def test_extract_still_reads_integers_of_any_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(f'{{"id": {DIGITS}, "text": "7"}}\n'))
    r = cli("extract", "--jsonl")
    assert r.returncode == 0, r.stderr
    assert '"value": 7' in r.stdout


# -- the guarded reader itself ----------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=30)


def _nest(value: Any, depth: int, kind: str) -> Any:
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@settings(max_examples=200, deadline=None)
@given(JSON, st.integers(0, 130), st.sampled_from(["list", "object"]), st.booleans())
def test_parse_agrees_with_json_within_the_limits(value: Any, depth: int, kind: str,
                                                  indent: bool) -> None:
    text = json.dumps(_nest(value, depth, kind), indent=1 if indent else None)
    expected = json.loads(text)
    deepest = _depth(expected)
    if deepest > MAX_DEPTH:
        with pytest.raises(BadJson, match="nested deeper than 100 levels"):
            parse(text)
    else:
        assert parse(text) == expected


def _depth(value: Any) -> int:
    stack, deepest = [(value, 0)], 0
    while stack:
        v, d = stack.pop()
        if isinstance(v, list | dict):
            deepest = max(deepest, d + 1)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='[]{}",:0123456789.-eE \n\\tnulrsfa', max_size=200)
       | st.binary(max_size=100).map(lambda b: b.decode("utf-8", "replace")))
def test_parse_of_any_text_is_a_value_or_bad_json(text: str) -> None:
    """Never another exception: the same value as json.loads, or BadJson."""
    try:
        expected: Any = json.loads(text)
    except (ValueError, RecursionError):
        with pytest.raises(BadJson):
            parse(text)
        return
    assert parse(text) == expected or expected != expected  # noqa: PLR0124 (NaN)


@pytest.mark.parametrize("digits", [MAX_DIGITS, MAX_DIGITS + 1])
def test_digit_limit_is_exact_and_names_the_line(digits: int) -> None:
    text = '{\n"a": "' + "1" * 5000 + '",\n"b": ' + "1" * digits + "}"  # a long string is fine
    if digits <= MAX_DIGITS:
        assert parse(text)["b"] == int("1" * digits)
    else:
        with pytest.raises(BadJson) as err:
            parse(text)
        assert err.value.line == 3 and err.value.at("f.json").startswith("f.json:3: a number")


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = json.dumps({"a": "[" * 5000, "b": '\\"[' * 300, "c": [1, [2, {"d": "]]]"}]]})
    assert parse(text) == json.loads(text)


@pytest.mark.parametrize("text,limits", [
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), {}),  # short, yet one level too deep
    ("[[[[1]]]]", {"max_depth": 3}),
    ("[" + "9" * 12 + "]", {"max_digits": 10}),  # short, yet a number too long
])
def test_short_texts_meet_the_same_limits(text: str, limits: dict[str, int]) -> None:
    with pytest.raises(BadJson):
        parse(text, **limits)


def test_a_stream_chunk_within_the_limits_parses_as_json_does() -> None:
    chunk = json.dumps({"choices": [{"index": 0, "text": " [{", "token_ids": [260]}],
                        "usage": None})
    assert parse(chunk) == json.loads(chunk)
