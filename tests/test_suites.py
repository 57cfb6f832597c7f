from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.errors import UsageError
from abgate.suites import load_suite, parse_seeds, select_items
from abgate.suites.prompts import BUILTIN_SHOTS, PromptConfig, build_messages, resolve_shots
from abgate.suites.synthetic import LEVELS


def test_gsm8k_local_jsonl(gsm8k_path: Path) -> None:
    suite = load_suite("gsm8k", str(gsm8k_path))
    assert len(suite.items) == 1319
    assert len({i.id for i in suite.items}) == 1319
    assert suite.items[0].id.startswith("gsm8k-")
    assert suite.data_sha256 and len(suite.data_sha256) == 64
    # stable IDs: the same question gives the same ID in a subset file
    again = load_suite("gsm8k", str(gsm8k_path))
    assert [i.id for i in again.items[:5]] == [i.id for i in suite.items[:5]]


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"question": "q1", "answer": "x #### 3"}\n{"question": oops}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:2: not valid JSON"):
        load_suite("gsm8k", str(p))
    p.write_text('{"question": "q1", "answer": "x #### 3"}\n\n{"question": "q2"}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:3: missing key 'answer'"):
        load_suite("gsm8k", str(p))
    p.write_text('{"question": "q1", "answer": "no final value"}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:1: answer has no integer"):
        load_suite("gsm8k", str(p))


def test_parquet_matches_jsonl(tmp_path: Path, gsm8k_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in gsm8k_path.read_text().splitlines()[:20]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "g.parquet")
    suite = load_suite("gsm8k", str(tmp_path / "g.parquet"))
    ref = load_suite("gsm8k", str(gsm8k_path))
    assert suite.items == ref.items[:20]


def test_hub_loader_reads_a_local_dataset(tmp_path: Path, gsm8k_path: Path) -> None:
    pytest.importorskip("datasets", reason="the 'datasets' extra is not installed")
    from abgate.suites.gsm8k import load_hub

    d = tmp_path / "gsm8k_mirror"
    d.mkdir()
    lines = gsm8k_path.read_text().splitlines()[:12]
    (d / "test.jsonl").write_text("\n".join(lines) + "\n")
    suite = load_hub(f"hf:{d}", split="test")
    ref = load_suite("gsm8k", str(gsm8k_path))
    assert suite.items == ref.items[:12]
    assert suite.source.startswith("hf:")


def test_hub_without_datasets_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def fake_import(name: str, *a: object, **k: object) -> object:
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(UsageError, match=r"abgate\[datasets\]"):
        load_suite("gsm8k", "hf:openai/gsm8k")


def test_unknown_suite_suggests() -> None:
    with pytest.raises(UsageError, match="unknown suite 'gsm8'.*'gsm8k'"):
        load_suite("gsm8", None)


def test_synthetic_is_seeded_and_exact() -> None:
    a = load_suite("synthetic", difficulty="medium", synthetic_seed=3)
    b = load_suite("synthetic", difficulty="medium", synthetic_seed=3)
    c = load_suite("synthetic", difficulty="medium", synthetic_seed=4)
    assert a.items == b.items
    assert a.items != c.items
    assert all(isinstance(i.answer, int) and i.answer > 0 for i in a.items)
    with pytest.raises(UsageError, match="unknown difficulty 'hardd'.*'hard'"):
        load_suite("synthetic", difficulty="hardd")


@pytest.mark.parametrize("difficulty", sorted(LEVELS))
def test_synthetic_step_counts(difficulty: str) -> None:
    lo, hi = LEVELS[difficulty].steps
    for item in load_suite("synthetic", difficulty=difficulty).items[:200]:
        steps = item.question.count(".") - 1  # one sentence per step after the first
        assert lo <= steps <= hi, item.question


def test_synthetic_answers_recomputed_from_text() -> None:
    # Re-derive a few easy answers by reading the story: a guard against text/answer drift.
    import re

    for item in load_suite("synthetic", difficulty="easy").items[:300]:
        total = int(re.match(r"\w+ has (\d+)", item.question).group(1))  # type: ignore[union-attr]
        for s in item.question.split(". ")[1:]:
            if m := re.search(r"buys (\d+) more", s):
                total += int(m.group(1))
            elif m := re.search(r"gets (\d+) packs with (\d+)", s):
                total += int(m.group(1)) * int(m.group(2))
            elif m := re.search(r"gives (\d+)", s):
                total -= int(m.group(1))
            elif "doubles" in s:
                total *= 2
            elif "triples" in s:
                total *= 3
            elif m := re.search(r"grows (\d+) times", s):
                total *= int(m.group(1))
            elif m := re.search(r"among (\d+) boxes", s):
                total //= int(m.group(1))
        assert total == item.answer, item.question


def test_selection_is_deterministic(gsm8k_path: Path) -> None:
    items = load_suite("gsm8k", str(gsm8k_path)).items
    assert select_items(items, limit=3) == list(items[:3])
    s1 = select_items(items, sample=10, sample_seed=7)
    assert s1 == select_items(items, sample=10, sample_seed=7)
    assert s1 != select_items(items, sample=10, sample_seed=8)
    assert [items.index(i) for i in s1] == sorted(items.index(i) for i in s1)
    with pytest.raises(UsageError, match="mutually exclusive"):
        select_items(items, limit=1, sample=1)
    with pytest.raises(UsageError, match="exceeds"):
        select_items(items, sample=5000)


def test_parse_seeds() -> None:
    assert parse_seeds("0,1, 2") == [0, 1, 2]
    with pytest.raises(UsageError, match="'x' is not an integer"):
        parse_seeds("0,x")
    with pytest.raises(UsageError, match="duplicates"):
        parse_seeds("1,1")


def test_k_shot_never_uses_evaluated_items(tmp_path: Path, gsm8k_path: Path) -> None:
    items = load_suite("gsm8k", str(gsm8k_path)).items[:5]
    shots = resolve_shots(PromptConfig(shots=3), items)
    assert shots == list(BUILTIN_SHOTS[:3])
    msgs = build_messages(items[0], PromptConfig(shots=3), shots)
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 3 + ["user"]
    assert "\\boxed{}" in msgs[-1]["content"] and items[0].question in msgs[-1]["content"]
    leaked = tmp_path / "shots.jsonl"
    leaked.write_text(json.dumps({"question": items[2].question, "answer": "\\boxed{1}"}) + "\n")
    with pytest.raises(UsageError, match="also an evaluated item"):
        resolve_shots(PromptConfig(shots=1, shots_file=str(leaked)), items)
