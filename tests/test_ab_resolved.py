"""ab.json records the experiment as resolved (``experiment_resolved``: every field,
defaults included) beside the experiment as given (``experiment``, whose digest
``--resume`` compares and which stays as it was); an ab.json written before the field
existed still reads and resumes."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from abgate.ab.experiment import Evidence, Experiment, Schedule, parse_experiment
from abgate.records.documents import AbRecord
from abgate.runner.documents import read_record
from abgate.runner.spec import RunConfig
from tests.support.fake import cli, experiment
from tests.support.records import edit_record

GOLDEN_AB = Path(__file__).resolve().parent / "data" / "golden" / "v1" / "ab"


def test_fake_ab_records_the_resolved_experiment(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "ab.toml", "perturb = 0.05", limit=3)
    out = tmp_path / "AB"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 3, r.stderr  # 3 items decide nothing
    raw = json.loads((out / "ab.json").read_text())
    resolved, given = raw["experiment_resolved"], raw["experiment"]
    assert resolved["schedule"] == {"mode": "auto", "warmup": 1, "block_size": 8,
                                    "stopping": "fixed", "max_items": None, "look_every": 1}
    assert resolved["evidence"] == {**dataclasses.asdict(Evidence()), "log_patterns": []}
    assert resolved["expect"] == "lossy" and resolved["policy_name"] == "default"
    assert resolved["changes"] == {"a": [], "b": []} and resolved["allow_differences"] == []
    assert resolved["bench"] == {"input_len": [], "output_len": 128, "repeats": 3,
                                 "warmup": 1}
    # every RunConfig field, defaults too, but the engine args (records v2: they are the
    # arm's run.json engine section's given facet, once)
    full = set(RunConfig.__dataclass_fields__) - {"engine_args"}
    for arm in ("a", "b"):
        assert set(resolved["arms"][arm]) == full
        assert resolved["arms"][arm]["temperature"] == 0.0
        assert resolved["arms"][arm]["limit"] == 3
    arm_b = json.loads((out / "arms" / "b" / "run.json").read_text())
    assert arm_b["engine"]["given"] == {"perturb": 0.05}
    # the experiment as given is as before: defaults left out (its digest is resume's)
    assert "stopping" not in given["schedule"]
    assert not {"expect", "evidence", "changes", "experiment_resolved"} & set(given)
    doc = read_record(out / "ab.json", "ab", model=AbRecord)
    assert doc.experiment_resolved is not None
    assert doc.experiment_resolved.to_dict() == resolved
    setup = (out / "report.md").read_text()
    assert ("Defaults applied: stopping=fixed, expect=lossy, evidence (agreement=true, "
            "agreement_tokens=64, probes=true, probe_len=512, weights=false).") in setup


def test_resolved_holds_every_field_and_reads_back_as_the_experiment() -> None:
    exp = parse_experiment({
        "name": "x", "expect": "lossless", "shared": {"engine": "fake", "limit": 4},
        "schedule": {"stopping": "sequential", "look_every": 2},
        "evidence": {"agreement_tokens": 8, "log_patterns": ["oops"]},
        "arms": {"a": {}, "b": {"engine_args": {"perturb": 1.0}, "changes": ["engine_args.*"]}},
    }, "x.toml")
    resolved = exp.resolved("fast-path")
    assert set(resolved) == {f.name for f in dataclasses.fields(Experiment)} | {"policy_name"}
    assert resolved["schedule"] == {**dataclasses.asdict(Schedule(stopping="sequential",
                                                                  look_every=2))}
    assert resolved["changes"] == {"a": [], "b": ["engine_args.*"]}
    assert resolved["policy_name"] == "fast-path"
    back = {k: v for k, v in resolved.items() if k != "policy_name"}
    again = Experiment.from_dict(json.loads(json.dumps(back)))  # every arm's changes listed
    assert again.to_dict() == exp.to_dict() and again.resolved("fast-path") == resolved
    # an explicit default and an omitted one resolve alike; as given, both are left out
    same = parse_experiment({"shared": {"engine": "fake"}, "expect": "lossy",
                             "arms": {"a": {}, "b": {}}}, "y.toml")
    plain = parse_experiment({"shared": {"engine": "fake"}, "arms": {"a": {}, "b": {}}},
                             "z.toml")
    assert same.resolved() == plain.resolved() and same.to_dict() == plain.to_dict()


def test_old_ab_without_the_field_reads_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "AB"
    shutil.copytree(GOLDEN_AB, out)
    (out / ".abgate.lock").unlink(missing_ok=True)
    before = json.loads((out / "ab.json").read_text())
    assert "experiment_resolved" not in before
    assert read_record(out / "ab.json", "ab", model=AbRecord).experiment_resolved is None
    edit_record(out / "ab.json", status="interrupted")  # killed before the last sample
    samples = out / "arms" / "b" / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[:-1]))
    # the golden set was recorded from another commit of abgate: that is allowed here
    r = cli("ab", "--resume", str(out), "--allow-source-change")
    assert r.returncode == 3, r.stderr  # the digest of `experiment` matched
    after = json.loads((out / "ab.json").read_text())
    assert after["status"] == "complete" and len(after["resumes"]) == 1
    assert after["experiment"] == before["experiment"] and after["digest"] == before["digest"]
    assert "experiment_resolved" not in after  # what the first start ran is not known
    keys = [json.loads(s)["key"] for s in samples.read_text().splitlines()
            if not json.loads(s)["warmup"]]
    assert len(keys) == len(set(keys)) == 3
    assert "Defaults applied" not in (out / "report.md").read_text()
