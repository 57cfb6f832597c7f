"""Acceptance policy files: the shipped default, overrides and one-line usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.compare import Verdict, load_policy
from abgate.compare.policy import DEFAULT_POLICY
from abgate.errors import UsageError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_shipped_default() -> None:
    policy = load_policy(None)
    assert policy.name == "default" and policy.source == DEFAULT_POLICY
    assert policy.min_items == 30 and policy.power == 0.8
    assert policy.speed.metric == "steady_decode_tps"
    assert policy.speed.min_speedup == 0.02 and policy.speed.confidence == 0.95
    assert policy.quality.alpha == 0.025 and policy.quality.max_accuracy_drop == 0.05
    assert policy.diagnostics.min_identical_fraction is None
    assert len(policy.sha256) == 64
    json.dumps(Verdict(policy=policy).to_json()["policy"], allow_nan=False)  # as recorded


def test_override_keeps_other_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "[speed]\nmin_speedup = 0.1\n\n[diagnostics]\n"
                           "min_identical_fraction = 1\n")
    policy = load_policy(path)
    assert policy.speed.min_speedup == 0.1
    assert policy.speed.max_slowdown == load_policy(None).speed.max_slowdown
    assert policy.quality == load_policy(None).quality
    assert policy.diagnostics.min_identical_fraction == 1.0
    assert policy.name == "policy" and policy.source == str(path)
    assert load_policy(str(path)).sha256 == policy.sha256


def test_unknown_key_suggests_close_match_with_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n\n[speed]\nmin_sppedup = 0.1\n')
    with pytest.raises(UsageError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert message == (f"policy {path}:4: unknown key 'speed.min_sppedup' "
                       "(did you mean 'min_speedup'?)")


def test_unknown_top_level_key_and_section(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r":1: unknown key 'min_itmes' .*'min_items'"):
        load_policy(write(tmp_path, "min_itmes = 40\n"))
    with pytest.raises(UsageError, match=r":2: unknown key 'qualty' .*'quality'"):
        load_policy(write(tmp_path, "\n[qualty]\nalpha = 0.05\n"))


def test_key_in_the_right_section_is_found_on_its_line(tmp_path: Path) -> None:
    text = ("[speed]\nconfidence = 0.9\n\n[quality]\nalpha = 0.025\nconfidence = 0.9\n")
    with pytest.raises(UsageError, match=r"policy .*:6: unknown key 'quality.confidence'"):
        load_policy(write(tmp_path, text))


@pytest.mark.parametrize(("text", "expected"), [
    ('[speed]\nmin_speedup = "fast"\n', r":2: speed.min_speedup must be a number > -1 "
                                         r"\(negative: a tolerated slowdown\), got 'fast'"),
    ("[speed]\nconfidence = 1.5\n", r":2: speed.confidence must be a number in \(0, 1\)"),
    ("[quality]\nalpha = true\n", r":2: quality.alpha must be a number in \(0, 0.5\)"),
    ("min_items = 2.5\n", r":1: min_items must be an integer >= 2"),
    ('[speed]\nmetric = "decode_tps"\n', r":2: speed.metric must be one of .*did you mean"),
    ("speed = 3\n", r":1: 'speed' must be a table"),
])
def test_bad_values_name_line_and_rule(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(UsageError, match=expected):
        load_policy(write(tmp_path, text))


def test_syntax_error_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[speed]\nmin_speedup = 0.1\nmax_slowdown = = 2\n")
    with pytest.raises(UsageError, match=rf"^policy {path}:3: invalid TOML: ") as caught:
        load_policy(path)
    assert "\n" not in str(caught.value)


def test_missing_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_policy(tmp_path / "nope.toml")
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not UTF-8"):
        load_policy(path)


def test_usage_error_exit_code(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_policy(write(tmp_path, "bogus = 1\n"))
    assert caught.value.exit_code == 2
