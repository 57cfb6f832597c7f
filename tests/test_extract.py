"""Answer extraction: adversarial table, number-grammar properties, priority rules, GSM8K."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abgate.scoring import numbers
from abgate.scoring.extract import REASONS, SOURCES, Extraction, extract_integer, reference_answer

# Property tests are judged on results, not speed: a loaded machine must not fail them.
no_deadline = settings(deadline=None)

GSM8K = Path(__file__).resolve().parents[2] / "shared/data/gsm8k/test.jsonl"

# (text, value, source, reason, why this is the right answer)
ADVERSARIAL: list[tuple[str, int | None, str | None, str | None, str]] = [
    ("...", None, None, "no_answer", "lm-eval flexible-extract reads '...' as an answer"),
    ("Let me think...\n\n...", None, None, "no_answer", "dots are punctuation, not a number"),
    ("", None, None, "no_answer", "nothing to read"),
    ("The answer is -5.", -5, "answer_phrase", None, "SGLang's \\d+ drops the minus sign"),
    ("The answer is 12.5", None, "answer_phrase", "non_integral", "SGLang reads 12.5 as 5"),
    ("#### 0.5", None, "hash", "non_integral", "never rounded to 0 or 1"),
    ("The answer is .75", None, "answer_phrase", "non_integral", "a bare decimal is a number"),
    ("\\boxed{12.0}", 12, "boxed", None, "an all-zero decimal part is an integer"),
    ("The total is 2,000.00 dollars.", 2000, "last_number", None, "thousands + zero decimals"),
    ("the answer is 6 * 12 = 64 shoes", 64, "answer_phrase", None, "after the span's last '='"),
    ("The answer is: total = 10 - 4 = 6", 6, "answer_phrase", None, "chained '=': last wins"),
    ("Put it in \\boxed{}.\nThe answer is 7", 7, "answer_phrase", None, "empty box = echo"),
    ("\\boxed{}. So \\boxed{8}. Again \\boxed{ }", 8, "boxed", None, "last NON-EMPTY box"),
    ("\\boxed{...}\nThe answer is 7", None, "boxed", "malformed", "no fall-back past a box"),
    ("\\boxed{x}\nso 5", None, "boxed", "malformed", "a box without a number"),
    ("\\boxed{\\text{12 apples}}", 12, "boxed", None, "\\text{} is markup"),
    ("\\boxed{1{,}234}", 1234, "boxed", None, "LaTeX thousands separator"),
    ("$\\boxed{\\$1,234,567}$", 1234567, "boxed", None, "escaped dollar + groups of three"),
    ("\\boxed{\\frac{1}{2}}", None, "boxed", "non_integral", "a fraction is not its numerator"),
    ("\\boxed{\\dfrac{10}{2}}", 5, "boxed", None, "an exact fraction is an integer"),
    ("\\fbox{9}", 9, "boxed", None, "\\fbox counts as a box"),
    ("\\boxed{\\boxed{7}}", 7, "boxed", None, "nested boxes: balanced braces"),
    ("\\boxed{5} then \\boxed{6", 5, "boxed", None, "an unclosed box is not a box"),
    ("\\boxed{x = 5}", 5, "boxed", None, "'=' rule inside a box"),
    ("\\(\\boxed{4}\\)", 4, "boxed", None, "math delimiters are ignored"),
    ("#### 42\nthe answer is 7", 42, "hash", None, "rule order, not position"),
    ("\\boxed{9}\nThe answer is 7\n#### 3", 9, "boxed", None, "box beats everything"),
    ("#### Step 1: add\n2 + 3 = 5\nThe answer is 5", 5, "answer_phrase", None, "a heading"),
    ("####\n\n**18**", 18, "hash", None, "marker ends its line: next non-empty line"),
    ("#### ...\nThe answer is 7", None, "hash", "malformed", "no fall-back past '####'"),
    ("#### -3", -3, "hash", None, "negative GSM8K reference"),
    ("####  **$18.00**", 18, "hash", None, "emphasis, currency, zero decimals"),
    ("**Final Answer:** **42**", 42, "answer_phrase", None, "markdown around phrase and number"),
    ("**Answer**: $-7$", -7, "answer_phrase", None, "emphasis between 'Answer' and ':'"),
    ("ANSWER: 3 apples", 3, "answer_phrase", None, "phrases are case-insensitive"),
    ("The answer is not known.\nMaybe 5", None, "answer_phrase", "malformed", "no fall-back"),
    ("The answer is\n\n$$\n42\n$$", 42, "answer_phrase", None, "skip lines with no digit/letter"),
    ("The answer isn't 5, it's 6", 6, "last_number", None, "'isn't' is not 'is'"),
    ("The answer is 1, then 2. Final answer: 3", 3, "answer_phrase", None, "the LAST phrase"),
    ("pages 10-20", 20, "last_number", None, "'-' after a digit is a range, not a sign"),
    ("10-4", 4, "last_number", None, "'-' after a digit is an operator"),
    ("so x-4", 4, "last_number", None, "'-' after a letter is an operator"),
    ("so x=-4", -4, "last_number", None, "'-' after '=' is a sign"),
    ("the loss (-4)", -4, "last_number", None, "'-' after '(' is a sign"),
    ("The answer is \u22125", -5, "answer_phrase", None, "U+2212 minus sign"),
    ("The answer is \\$-5", -5, "answer_phrase", None, "currency before the sign"),
    ("The answer is -\\$5", -5, "answer_phrase", None, "currency after the sign"),
    ("The answer is \u00a3-5 or so", -5, "answer_phrase", None, "pound sign"),
    ("The answer is -\u20ac5", -5, "answer_phrase", None, "euro sign"),
    ("The answer is +5", 5, "answer_phrase", None, "explicit plus sign"),
    ("The answer is 1,23", 1, "answer_phrase", None, "',23' is not a group of three"),
    ("The answer is 1\u00a0234", 1234, "answer_phrase", None, "no-break space groups"),
    ("The answer is 1\\,234", 1234, "answer_phrase", None, "LaTeX thin-space groups"),
    ("The answer is 1 234", 1, "answer_phrase", None, "a plain space does not group"),
    ("The answer is 50%", 50, "answer_phrase", None, "percent sign is allowed"),
    ("The answer is 12.50\\%", None, "answer_phrase", "non_integral", "12.5 percent"),
    ("The answer is 5.", 5, "answer_phrase", None, "trailing full stop is punctuation"),
    ("The answer is 5...", 5, "answer_phrase", None, "trailing ellipsis is punctuation"),
    ("The answer is **\\mathbf{-12}**", -12, "answer_phrase", None, "\\mathbf and ** markup"),
    ("The answer is 007", 7, "answer_phrase", None, "leading zeros"),
    ("I ate 3 apples and 1/2 a pie", None, "last_number", "non_integral", "a/b is a fraction"),
    ("Due 3/4/2020", 2020, "last_number", None, "a/b/c is a date, not a fraction"),
    ("<<48/2=24>>24 eggs", 24, "last_number", None, "GSM8K calculator annotation"),
    ("The answer is 123456", 123456, "answer_phrase", None, "inspect equates 123456/123457"),
    ("#### 1,319", 1319, "hash", None, "GSM8K-style thousands"),
]


@pytest.mark.parametrize(("text", "value", "source", "reason", "why"), ADVERSARIAL)
def test_adversarial(
    text: str, value: int | None, source: str | None, reason: str | None, why: str
) -> None:
    got = extract_integer(text)
    assert (got.value, got.source, got.reason) == (value, source, reason), why


def test_exact_at_any_size() -> None:
    big = "9" * 5000  # over Python's 4300-digit str->int limit
    got = extract_integer(f"The answer is {big}.")
    assert got.value == 10**5000 - 1
    assert extract_integer("#### 123456789012345678901234567891").value == (
        123456789012345678901234567891  # a float round-trip would end in ...7552
    )
    assert extract_integer("123457").value != extract_integer("123456").value
    assert "Extraction(value=999" in repr(got)  # repr must not hit the digit limit
    assert len(got.span or "") <= 200


def test_extraction_api() -> None:
    ok = extract_integer("\\boxed{42}")
    assert ok.valid and ok.to_dict() == {
        "value": 42,
        "source": "boxed",
        "reason": None,
        "span": "42",
    }
    bad = extract_integer("nothing")
    assert not bad.valid and bad.to_dict()["reason"] == "no_answer"
    assert Extraction(None, None, "no_answer").span is None


def test_reference_answer() -> None:
    assert reference_answer("She pays 3 * 6 = <<3*6=18>>18.\n#### 18") == 18
    assert reference_answer("x\n#### -10") == -10
    assert reference_answer("x\n#### 65,960") == 65960
    with pytest.raises(ValueError, match="no '####'"):
        reference_answer("The answer is 5")
    with pytest.raises(ValueError, match="non_integral"):
        reference_answer("#### 2.5")
    with pytest.raises(ValueError, match="malformed"):
        reference_answer("#### ???")


# ---------------------------------------------------------------- number grammar


def _group(digits: str, sep: str) -> str:
    head = len(digits) % 3 or 3
    parts = [digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)]
    return sep.join(parts)


@st.composite
def written_integers(draw: st.DrawFn) -> tuple[int, str]:
    """An integer and one of the many ways a model may write it."""
    value = draw(st.integers(min_value=-(10**30), max_value=10**30))
    sep = draw(st.sampled_from(["", ",", "{,}", "\u00a0", "\u202f", "\\,"]))
    body = _group(str(abs(value)), sep)
    body += draw(st.sampled_from(["", ".0", ".00", ".000"]))
    body += draw(st.sampled_from(["", "%", "\\%"]))
    signs = ["-", "\u2212"] if value < 0 else ["", "+"]
    sign = draw(st.sampled_from(signs))
    currency = draw(st.sampled_from(["", "$", "\\$", "\u20ac", "\u00a3"]))
    lead = sign + currency if draw(st.booleans()) else currency + sign
    wrap = draw(
        st.sampled_from(["@", "**@**", "\\text{@}", "\\mathbf{@}", "$@$", "\\(@\\)", "\\[@\\]"])
    )
    tail = draw(st.sampled_from(["", ".", "!", ",", ")", " dollars.", ";"]))
    return value, wrap.replace("@", lead + body) + tail


@st.composite
def contexts(draw: st.DrawFn) -> tuple[str, str]:
    """A template with '@' where the number goes, and the rule that must read it."""
    return draw(
        st.sampled_from(
            [
                ("The answer is @", "answer_phrase"),
                ("**Final Answer:** @", "answer_phrase"),
                ("Work: 2 + 2 = 4.\nAnswer:\n\n@", "answer_phrase"),
                ("\\boxed{@}", "boxed"),
                ("So the result is $\\boxed{@}$.", "boxed"),
                ("3 + 4 = 7\n#### @", "hash"),
                ("She has 3 cats. In total she pays @", "last_number"),
            ]
        )
    )


@no_deadline
@given(written_integers(), contexts())
def test_any_written_integer_reads_back(written: tuple[int, str], context: tuple[str, str]) -> None:
    value, text = written
    template, source = context
    got = extract_integer(template.replace("@", text))
    assert (got.value, got.source, got.reason) == (value, source, None)


@no_deadline
@given(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.from_regex(r"[0-9]{0,5}[1-9][0-9]{0,5}", fullmatch=True),
    st.booleans(),
    contexts(),
)
def test_non_zero_decimals_are_never_rounded(
    whole: int, decimals: str, bare: bool, context: tuple[str, str]
) -> None:
    number = f".{decimals}" if bare else f"{whole}.{decimals}"
    template, source = context
    got = extract_integer(template.replace("@", number))
    assert (got.value, got.source, got.reason) == (None, source, "non_integral")


@no_deadline
@given(st.integers(min_value=0, max_value=10**40), st.integers(min_value=1, max_value=10**6))
def test_neighbouring_integers_never_match(value: int, delta: int) -> None:
    a = extract_integer(f"The answer is {value}").value
    b = extract_integer(f"The answer is {value + delta}").value
    assert a == value and b == value + delta


@no_deadline
@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["-", "\u2212"]),
    st.sampled_from(list("0123456789abcxyzXYZ)]}")),
)
def test_minus_after_operand_is_an_operator(a: int, b: int, minus: str, before: str) -> None:
    assert extract_integer(f"{a}{minus}{b}").value == b
    assert extract_integer(f"value {before}{minus}{b}").value == b


@no_deadline
@given(
    st.integers(min_value=1, max_value=10**6),
    st.sampled_from(["-", "\u2212"]),
    st.sampled_from(["", "x = ", "(", " ", "\n", "**", "{", ": "]),
)
def test_minus_after_start_equals_paren_space_is_a_sign(b: int, minus: str, before: str) -> None:
    assert extract_integer(f"{before}{minus}{b}").value == -b


@no_deadline
@given(
    st.lists(st.integers(min_value=-(10**9), max_value=10**9), min_size=1, max_size=8),
    st.sampled_from([" ", "; ", " and ", "\n", ", "]),
)
def test_last_number_is_last(values: list[int], sep: str) -> None:
    text = "Steps: " + sep.join(str(v) for v in values)
    got = extract_integer(text)
    assert (got.value, got.source) == (values[-1], "last_number")


# ---------------------------------------------------------------- priority rules

_values = st.none() | st.integers(min_value=-999, max_value=10**6)


@no_deadline
@given(_values, _values, _values, st.integers(min_value=0, max_value=999), st.randoms())
def test_first_present_rule_decides_wherever_it_appears(
    box: int | None, hashed: int | None, phrase: int | None, last: int, rnd: random.Random
) -> None:
    parts = [f"Total {last} items"]
    if box is not None:
        parts.append(f"So $\\boxed{{{box}}}$.")
    if hashed is not None:
        parts.append(f"#### {hashed}")
    if phrase is not None:
        parts.append(f"The answer is {phrase}.")
    rnd.shuffle(parts)
    text = "Step 1: 3 + 4 = 7.\n" + "\n".join(parts)
    ranked = ((box, "boxed"), (hashed, "hash"), (phrase, "answer_phrase"))
    expected = next(((v, s) for v, s in ranked if v is not None), None)
    got = extract_integer(text)
    if expected is None:
        assert (got.value, got.source) == (last, "last_number")
    else:
        assert (got.value, got.source) == expected


@no_deadline
@given(
    st.sampled_from(
        [
            ("\\boxed{...}", "boxed"),
            ("\\boxed{\\text{see above}}", "boxed"),
            ("#### ...", "hash"),
            ("#### \n\n???", "hash"),
            ("The answer is unclear.", "answer_phrase"),
            ("Final answer: **N/A**", "answer_phrase"),
        ]
    ),
    st.integers(min_value=0, max_value=10**6),
)
def test_no_fall_back_past_a_malformed_candidate(bad: tuple[str, str], later: int) -> None:
    text, source = bad
    lower = {"boxed": f"#### {later}\nThe answer is {later}", "hash": f"The answer is {later}"}
    full = f"{text}\n{lower.get(source, '')}\nso {later} in total"
    got = extract_integer(full)
    assert (got.value, got.source, got.reason) == (None, source, "malformed")


# fmt: off
_JUNK = [
    "\\boxed{", "\\fbox{", "{", "}", "\\}", "####", "#", "answer is ", "Answer:", "final answer",
    "-", "\u2212", "+", "1", "23", "456", ",", ".", "=", "/", "%", "$", "\\$", "\\text{", "{,}",
    "\n", " ", "**", "\u00a0", "\\,", "\\frac{1}{", "x", "\ufffd", "\x00", "e",
]
# fmt: on


@no_deadline
@given(st.lists(st.sampled_from(_JUNK), max_size=40).map("".join) | st.text(max_size=200))
def test_never_raises_and_result_is_coherent(text: str) -> None:
    got = extract_integer(text)
    assert got == extract_integer(text)  # pure
    assert got.source in (*SOURCES, None)
    assert got.reason in (*REASONS, None)
    assert (got.value is None) == (got.reason is not None)
    assert (got.source is None) == (got.reason == "no_answer")
    assert got.reason != "malformed" or got.source != "last_number"
    json.dumps(got.to_dict())


_NUMBERISH = ["1", "23", "456", "0", ",", ".", "/", "-", "+", "\u2212", "%", "\\%", " ", "x", ")"]


@no_deadline
@given(st.lists(st.sampled_from(_NUMBERISH), max_size=30).map("".join))
def test_last_number_shortcut_equals_a_full_scan(text: str) -> None:
    """last_number tokenizes only the tail; it must agree with scanning everything."""
    matches = list(numbers._NUMBER.finditer(text))
    expected = numbers._to_number(matches[-1], text) if matches else None
    assert numbers.last_number(text) == expected


def test_linear_time_on_degenerate_input() -> None:
    texts = [
        "\\boxed{" * 20_000 + "1" + "#### " * 20_000 + "answer is " * 20_000,
        "#### a" * 20_000 + "\n" * 20_000,
        "Answer:" + "\n" * 50_000 + "1-" * 20_000,
        "1," * 50_000 + "1/2/" * 20_000,
    ]
    for text in texts:
        start = time.perf_counter()
        extract_integer(text)
        assert time.perf_counter() - start < 5.0  # catastrophic backtracking takes minutes


# ---------------------------------------------------------------- GSM8K references


@pytest.fixture(scope="module")
def gsm8k() -> list[dict[str, str]]:
    if not GSM8K.exists():
        pytest.skip(f"GSM8K test split not found at {GSM8K}")
    return [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()]


def _hash_value(answer: str) -> int:
    return int(answer.rsplit("####", 1)[1].strip().replace(",", ""))


def test_every_gsm8k_reference_extracts_to_its_hash_value(gsm8k: list[dict[str, str]]) -> None:
    assert len(gsm8k) == 1319
    for row in gsm8k:
        expected = _hash_value(row["answer"])
        got = extract_integer(row["answer"])
        assert (got.value, got.source) == (expected, "hash"), row["answer"]
        assert reference_answer(row["answer"]) == expected


def test_gsm8k_solutions_rewritten_for_each_rule(gsm8k: list[dict[str, str]]) -> None:
    """The solution bodies (with <<a*b=c>> annotations) as model-style outputs."""
    for row in gsm8k:
        body, written = row["answer"].rsplit("####", 1)
        expected, written = _hash_value(row["answer"]), written.strip()
        plain = re.sub(r"<<[^>]*>>", "", body).rstrip()
        cases = {
            "boxed": f"{body}So the final answer is $\\boxed{{{written}}}$.",
            "answer_phrase": f"{body}**The answer is:** ${written}",
            "last_number": f"{plain}\nSo the total is {written}.",
        }
        for source, text in cases.items():
            got = extract_integer(text)
            assert (got.value, got.source) == (expected, source), text
