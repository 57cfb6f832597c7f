"""``abgate extract``: single text, JSON-lines re-scoring, --field paths, usage errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import abgate.cli.extract_cmd  # noqa: F401  (registers the command)
from abgate.cli.extract_cmd import resolve_field
from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.scoring.numbers import parse_digits

SRC = Path(__file__).resolve().parents[1] / "src"
runner = CliRunner()


def _exact_int(literal: str) -> int:
    """json's own int parsing stops at 4300 digits; abgate writes exact ints of any size."""
    return -parse_digits(literal[1:]) if literal.startswith("-") else parse_digits(literal)


def _lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line, parse_int=_exact_int) for line in output.splitlines()]


def test_single_text() -> None:
    result = runner.invoke(app, ["extract", "So the answer is **$1,234**."])
    assert result.exit_code == 0 and result.output == "1234\n"
    result = runner.invoke(app, ["extract", "\\boxed{12.5}"])
    assert result.output == "invalid: non_integral\n"
    result = runner.invoke(app, ["extract", "..."])
    assert result.output == "invalid: no_answer\n"


def test_single_text_from_stdin_with_explain() -> None:
    result = runner.invoke(app, ["extract", "--explain", "-"], input="Work.\n#### -3\n")
    assert result.exit_code == 0
    assert result.output.splitlines() == ["-3", "source: hash", "span: '-3'"]


def test_jsonl_in_order_with_exact_keys() -> None:
    texts = ["#### 5", "The answer is 12.5", "", "\\boxed{...}", "x = -7", "9" * 5000]
    stdin = "".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts))
    stdin += "\n"  # a blank line is skipped, not an error
    stdin += '{"id": ' + "1" * 5000 + ', "text": "#### 3"}\n'  # other fields may be huge ints
    result = runner.invoke(app, ["extract", "--jsonl"], input=stdin)
    assert result.exit_code == 0, result.output
    rows = _lines(result.output)
    assert all(list(row) == ["value", "source", "reason"] for row in rows)
    assert [(r["value"], r["source"], r["reason"]) for r in rows] == [
        (5, "hash", None),
        (None, "answer_phrase", "non_integral"),
        (None, None, "no_answer"),
        (None, "boxed", "malformed"),
        (-7, "last_number", None),
        (10**5000 - 1, "last_number", None),  # exact, past Python's 4300-digit limit
        (3, "hash", None),
    ]


def test_jsonl_field_paths_for_lm_eval_records() -> None:
    record = {
        "doc_id": 0,
        "resps": [["Let me see. 3 + 4 = 7\nThe answer is 7."]],
        "filtered_resps": ["7"],
    }
    for path in ("resps.0.0", "filtered_resps.0", "resps.-1.-1"):
        result = runner.invoke(
            app, ["extract", "--jsonl", "--field", path], input=json.dumps(record) + "\n"
        )
        assert result.exit_code == 0, (path, result.output)
        assert _lines(result.output)[0]["value"] == 7


def test_jsonl_explain_adds_the_span() -> None:
    result = runner.invoke(
        app, ["extract", "--jsonl", "--explain"], input='{"text": "\\\\boxed{x = 4}"}\n'
    )
    assert _lines(result.output) == [
        {"value": 4, "source": "boxed", "reason": None, "span": "x = 4"}
    ]


@pytest.mark.parametrize(
    ("stdin", "args", "message"),
    [
        ('{"text": "1"}\n{"text": \n', [], "stdin line 2: invalid JSON"),
        ('{"text": "1"}\n\n{"txt": "2"}\n', [], "stdin line 3: the record has no key 'text'"),
        ('{"resps": [["a"]]}\n', ["--field", "resps.0"], "(try 'resps.0.0')"),
        ('{"resps": []}\n', ["--field", "resps.0"], "stdin line 1: resps has 0 items"),
        ('"just a string"\n', [], "stdin line 1: the record is str"),
        ('{"text": null}\n', [], "field 'text' is NoneType, not a string"),
    ],
)
def test_jsonl_usage_errors_name_the_line(stdin: str, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["extract", "--jsonl", *args], input=stdin)
    assert isinstance(result.exception, UsageError), result.output
    assert message in str(result.exception)
    assert "\n" not in str(result.exception)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["extract"], "nothing to read"),
        (["extract", "--jsonl", "5"], "not both"),
        (["extract", "--field", "a.b", "5"], "only applies with --jsonl"),
    ],
)
def test_argument_usage_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, UsageError)
    assert message in str(result.exception)


def test_resolve_field() -> None:
    record = {"a": [{"b": "x"}, {"b": "y"}], "0": "zero"}
    assert resolve_field(record, "a.1.b") == "y"
    assert resolve_field(record, "0") == "zero"
    with pytest.raises(ValueError, match="a is a list; 'b' is not an index"):
        resolve_field(record, "a.b")
    with pytest.raises(ValueError, match=r"a\.0\.b is str, cannot take 'c'"):
        resolve_field(record, "a.0.b.c")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_main_prints_one_line_error_and_exits_2() -> None:
    """Through the real entry point: partial output, then ``abgate: error: ...``."""
    proc = subprocess.run(
        [sys.executable, "-c", "from abgate.cli import main; main()", "extract", "--jsonl"],
        input='{"text": "#### 4"}\nnot json\n',
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == '{"value": 4, "source": "hash", "reason": null}\n'
    assert proc.stderr.startswith("abgate: error: stdin line 2: invalid JSON")
    assert proc.stderr.count("\n") == 1


def test_installed_console_script() -> None:
    script = Path(sys.executable).with_name("abgate")
    exe = str(script) if script.exists() else shutil.which("abgate")
    if exe is None:
        pytest.skip("the abgate console script is not installed (pip install -e .)")
    proc = subprocess.run(
        [exe, "extract", "The answer is 6 * 12 = 72 eggs"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, "72\n"), proc.stderr
