from __future__ import annotations

from pathlib import Path

import pytest

from abgate.ab import load_experiment
from abgate.ab.checks import choose_mode, prepare_arms
from abgate.ab.schedule import blocks, interleaved
from abgate.errors import UsageError
from tests.conftest import REPO


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


BASE = """
[shared]
suite = "synthetic"
limit = 3
engine_args = { n_ctx = 1024 }
[arms.a]
[arms.b]
engine_args = { flash_attn = true }
"""


def test_example_loads_and_is_matched() -> None:
    exp = load_experiment(REPO / "examples" / "smollm2-kv-q8.toml")
    assert exp.baseline == "f16" and exp.candidates == ["q8"]
    assert exp.arms["q8"].engine_args == {"n_ctx": 1024, "flash_attn": True, "type_k": "q8_0",
                                          "type_v": "q8_0"}
    prepared = prepare_arms(exp)
    assert prepared["f16"].spec["item_ids"] == prepared["q8"].spec["item_ids"]
    assert choose_mode(exp) == "interleave"


def test_arm_args_merge_over_shared(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, BASE))
    assert exp.arms["a"].engine_args == {"n_ctx": 1024}
    assert exp.arms["b"].engine_args == {"n_ctx": 1024, "flash_attn": True}
    assert exp.baseline == "a"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE.replace("limit = 3", "limt = 3"), r"\[shared\]: unknown key 'limt'.*'limit'"),
        (BASE.replace("limit = 3", "limit = 'x'"), r"'limit' must be int"),
        (BASE.replace("[arms.b]\n", "[arms.b]\nmax_tokens = 5\n"),
         r"\[arms.b\]: unknown key 'max_tokens'"),
        (BASE.replace("[arms.a]\n", ""), "at least two"),
        ("baseline = 'c'\n" + BASE, "baseline 'c' is not an arm"),
        (BASE + "[schedule]\nmode = 'interleaved'\n", "'interleave'"),
        ("x = = 1\n" + BASE, r"invalid TOML.*line 1"),
    ],
)
def test_bad_experiment_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_experiment(write(tmp_path, text))


def test_unmatched_arms_are_refused(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, BASE.replace('engine_args = { flash_attn = true }',
                                                       'engine_args = { flash_atn = true }')))
    with pytest.raises(UsageError, match="flash_attn"):
        prepare_arms(exp)


def test_env_difference_forces_blocks(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, BASE + 'env = { GGML_SCHED_MAX_COPIES = "1" }\n'))
    assert choose_mode(exp) == "blocks"


def test_interleaved_order_is_balanced() -> None:
    order = interleaved([1, 2, 3, 4], ["A", "B"])
    assert order == [("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 3), ("B", 3), ("B", 4),
                     ("A", 4)]
    firsts = [order[i][0] for i in range(0, len(order), 2)]
    assert firsts.count("A") == firsts.count("B")


def test_blocks_alternate() -> None:
    assert blocks([1, 2, 3, 4, 5], ["A", "B"], 2) == [
        ("A", [1, 2]), ("B", [1, 2]), ("B", [3, 4]), ("A", [3, 4]), ("A", [5]), ("B", [5])]


def test_force_clears_only_an_ab_directory(tmp_path: Path) -> None:
    from abgate.runner.documents import new_record, write_record
    from abgate.runner.outdir import prepare_new_dir

    d = tmp_path / "AB"
    (d / "arms" / "a").mkdir(parents=True)
    (d / "arms" / "a" / "samples.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="holds no ab.json"):
        prepare_new_dir(d, force=True, marker="ab.json")
    (d / "ab.json").write_text("{}")  # a file of that name is not enough
    with pytest.raises(UsageError, match="not a valid abgate record"):
        prepare_new_dir(d, force=True, marker="ab.json")
    write_record(d / "ab.json", new_record(
        "ab", experiment={"baseline": "a", "arms": {"a": {}}}, arm_spec_digests={}, digest="x",
        engines={}, resumes=[],
        schedule={"mode": "blocks", "warmup": 0, "block_size": 1, "executed": []}))
    prepare_new_dir(d, force=True, marker="ab.json")
    assert list(d.iterdir()) == []
