"""One configuration model, parsed once: the TOML reader's lines, the one mapping of a
pydantic error to abgate's one-line error, and the same checks on every way a config
is made (a file, a record read back for ``--resume``, flags)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from abgate.ab.experiment import Experiment, Schedule, load_experiment, parse_experiment
from abgate.errors import UsageError
from abgate.runner.spec import RunConfig
from abgate.schema import replaced, usage_error
from abgate.tomlfile import parse_toml, read_toml
from tests.conftest import error_lines
from tests.support.fake import cli, experiment

TEXT = """name = "x"
[shared]
suite = "synthetic"
limit = 3

[arms.a]
[arms.q8]
engine_args = { flash_attn = true }
env.OMP_NUM_THREADS = "2"
"""


def test_line_of_finds_headers_keys_inline_tables_and_dotted_keys() -> None:
    doc = parse_toml(TEXT, "e.toml")
    assert doc.line_of(("shared",)) == 2
    assert doc.line_of(("shared", "limit")) == 4
    assert doc.line_of(("arms", "q8")) == 7
    assert doc.line_of(("arms", "q8", "engine_args", "flash_attn")) == 8  # inside the table
    assert doc.line_of(("arms", "q8", "env", "OMP_NUM_THREADS")) == 9
    assert doc.line_of(("arms", "q8", "env")) == 9  # set only through a dotted key
    assert doc.line_of(("arms",)) == 6  # no [arms] header: its first table's
    assert doc.line_of(("shared", "seeds", 0)) == 2  # not in the file: its table's line
    assert doc.line_of(("nowhere",)) is None


def test_toml_reader_errors_are_one_line_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("a = 1\nb = = 2\n")
    with pytest.raises(UsageError, match=r"bad.toml:2: invalid TOML: ") as caught:
        read_toml(bad)
    assert "\n" not in str(caught.value)
    bad.write_bytes(b"a = '\xff'\n")
    with pytest.raises(UsageError, match="not UTF-8"):
        read_toml(bad)
    with pytest.raises(UsageError, match="does not exist"):
        read_toml(tmp_path / "missing.toml", "experiment file")


@pytest.mark.parametrize(("edit", "message"), [
    (("engine_args = {", "engine_argz = {"),
     r"^e.toml:8 \[arms.q8\]: unknown key 'engine_argz' \(did you mean 'engine_args'"),
    (("limit = 3", "limit = true"), r"^e.toml:4 \[shared\]: 'limit' must be int, got True"),
    (('env.OMP_NUM_THREADS = "2"', "env.OMP_NUM_THREADS = 2"),
     r"^e.toml:9 \[arms.q8.env\]: 'OMP_NUM_THREADS' must be str, got 2"),
    (("[arms.a]", "[schedule]\nwarmup = -1\n[arms.a]"),
     r"^e.toml:7 \[schedule\]: warmup must be >= 0, got -1"),
    (("[arms.a]", "[schedule]\nmode = 'blocks'\nlook_every = 2\n[arms.a]"),
     r"^e.toml:8 \[schedule\]: max_items and look_every apply only with stopping"),
    (('name = "x"', 'name = "x"\nexpect = "losles"'),
     r"^e.toml:2: expect 'losles' is not one of lossy, lossless \(did you mean 'lossless'"),
    (('name = "x"', 'name = "x"\nbaseline = "q88"'),
     r"^e.toml:2: baseline 'q88' is not an arm \(did you mean 'q8'"),
])
def test_experiment_file_errors_name_file_line_and_key_path(
        tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = tmp_path / "e.toml"
    path.write_text(TEXT.replace(*edit))
    with pytest.raises(UsageError, match=message.replace("e.toml", str(path))) as caught:
        load_experiment(path)
    assert "\n" not in str(caught.value) and "pydantic" not in str(caught.value)


def _stored(**changes: Any) -> dict[str, Any]:
    exp = parse_experiment(parse_toml(TEXT, "e.toml").data, "e.toml")
    d = exp.to_dict()
    for path, value in changes.items():
        table = d
        *parents, key = path.split("__")
        for p in parents:
            table = table[p]
        table[key] = value
    return d


@pytest.mark.parametrize(("changes", "message"), [
    ({"schedule__warmup": -1}, r"\[schedule\]: warmup must be >= 0, got -1"),
    ({"evidence": {"probe_len": 8}}, r"\[evidence\]: probe_len must be >= 64, got 8"),
    ({"bench__repeats": 0}, r"\[bench\]: repeats must be >= 1, got 0"),
    ({"schedule__max_items": 5}, r"max_items and look_every apply only with stopping"),
    ({"baseline": "b"}, r"baseline 'b' is not an arm"),
    ({"arms__a__limit": "3"}, r"\[arms.a\]: 'limit' must be int"),
    ({"arms__a__temprature": 0.5}, r"unknown key 'temprature' \(did you mean 'temperature'"),
])
def test_a_record_is_checked_as_the_file_is(changes: dict[str, Any], message: str) -> None:
    """``Experiment.from_dict`` (``--resume``) goes through the same model and ranges."""
    assert Experiment.from_dict(_stored()).to_dict() == _stored()
    with pytest.raises(UsageError, match=r"^ab.json: experiment.*" + message):
        Experiment.from_dict(_stored(**changes), "ab.json: experiment")


def test_resumed_ab_with_an_out_of_range_stored_value_is_refused(tmp_path: Path) -> None:
    """A resumed A/B whose stored experiment has an out-of-range value is refused as the
    same value in the experiment file is: exit 2, one line, before any engine loads."""
    exp = experiment(tmp_path / "e.toml", "perturb = 0.05, crash_after = 5", limit=6,
                     agreement=False)
    out = tmp_path / "ab"
    assert cli("ab", str(exp), "-o", str(out)).returncode == 130
    doc = json.loads((out / "ab.json").read_text())
    doc["experiment"]["schedule"]["warmup"] = -1
    (out / "ab.json").write_text(json.dumps(doc))
    samples = sorted(p.stat().st_size for p in out.rglob("samples.jsonl"))
    resumed = cli("ab", "--resume", str(out))
    assert resumed.returncode == 2 and len(error_lines(resumed.stderr)) == 1, resumed.stderr
    assert "ab.json: experiment [schedule]: warmup must be >= 0, got -1" in resumed.stderr
    assert sorted(p.stat().st_size for p in out.rglob("samples.jsonl")) == samples
    exp.write_text(exp.read_text().replace("warmup = 1", "warmup = -1"))
    from_file = cli("ab", str(exp), "-o", str(tmp_path / "ab2"))
    assert from_file.returncode == 2
    assert "[schedule]: warmup must be >= 0, got -1" in from_file.stderr
    assert not (tmp_path / "ab2").exists()


def test_flags_that_replace_a_field_are_checked_and_named() -> None:
    with pytest.raises(UsageError, match=r"^--schedule: mode 'blocs' is not one of auto, "
                                         r"interleave, blocks \(did you mean 'blocks'"):
        replaced(Schedule(), "--schedule", mode="blocs")


def test_a_validation_error_is_never_shown_raw() -> None:
    """A config made in code with a bad value raises pydantic's error; the CLI shows it
    through the same one-line mapping."""
    with pytest.raises(ValidationError) as caught:
        RunConfig(limit="3")  # type: ignore[arg-type]
    error = usage_error(caught.value, RunConfig, "config")
    assert str(error) == "config: 'limit' must be int, got '3'" and error.exit_code == 2


def test_record_keeps_every_default() -> None:
    """A run's config as recorded holds every field, the defaults that applied included."""
    recorded = RunConfig(suite="synthetic").to_dict()
    assert recorded["max_tokens"] == 512 and recorded["temperature"] == 0.0
    assert set(recorded) == set(RunConfig.__dataclass_fields__)
    assert RunConfig.from_dict(recorded) == RunConfig(suite="synthetic")


def test_one_engine_group_on_every_engine_command() -> None:
    """run, bench, baseline record and ab declare the same engine options (one group)."""
    from typer.main import get_command

    from abgate.cli import app
    from abgate.cli.engine_opts import GROUP

    root = get_command(app)
    commands = {"run": root.commands["run"], "bench": root.commands["bench"],  # type: ignore[attr-defined]
                "ab": root.commands["ab"],  # type: ignore[attr-defined]
                "baseline record": root.commands["baseline"].commands["record"]}  # type: ignore[attr-defined]
    for name, cmd in commands.items():
        options = {p.name: (tuple(p.opts), p.help) for p in cmd.params if p.name in GROUP}
        assert set(options) == set(GROUP), name
        assert options == {p.name: (tuple(p.opts), p.help) for p in commands["run"].params
                           if p.name in GROUP}, name


def test_ab_without_a_file_takes_the_engine_group(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    r = cli("ab", "--engine", "fake", "--limit", "2", "--max-tokens", "24",
            "--env", "ABGATE_T_BOTH=1", "--b-env", "ABGATE_T_B=2", "--no-agreement",
            "--no-probes", "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr
    arms = json.loads((out / "ab.json").read_text())["experiment"]["arms"]
    assert {a: (c["engine"], c["env"]) for a, c in arms.items()} == {
        "A": ("fake", {"ABGATE_T_BOTH": "1"}),
        "B": ("fake", {"ABGATE_T_BOTH": "1", "ABGATE_T_B": "2"})}


def test_ab_with_a_file_refuses_the_engine_group(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "perturb = 0.05", limit=2)
    r = cli("ab", str(exp), "--engine", "llamacpp", "--concurrency", "2", "-o",
            str(tmp_path / "ab"))
    assert r.returncode == 2 and len(error_lines(r.stderr)) == 1, r.stderr
    assert "--engine, --concurrency: the engine options apply to an A/B without" in r.stderr
    assert not (tmp_path / "ab").exists()
