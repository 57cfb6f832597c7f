"""The ledger on real records: three runs and an A/B made by the CLI (2-3 items, 16
tokens; the fake engine on a model file, so it is hashed; the CLI in this process, each
run in its own), indexed by the commands themselves when they finish; a history
over the three runs; and ``abgate compare`` on the A/B's two arms reproducing that
A/B's own comparison.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abgate.ledger.store import opened
from tests.conftest import abgate
from tests.support.fake import cli


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ledger")
    ledger = root / "ledger.sqlite"
    weights = root / "model.bin"  # the fake model "is" any file: its SHA-256 is indexed
    weights.write_bytes(b"fake weights\n")
    threads = ["--engine", "fake", "--model", str(weights)]
    runs = []
    for k in range(3):
        out = root / f"run{k}"
        # each run in a process of its own, as a user runs them: one process that ran
        # another command first has more libraries mapped (a configuration difference)
        r = abgate("--ledger", str(ledger), "run", "--suite", "synthetic", "--limit", "2",
                   "--max-tokens", "16", *threads, "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert "ledger: new run" in r.stderr
        runs.append(out)
    ab = root / "ab"
    r = cli("--ledger", str(ledger), "ab", "--suite", "synthetic", "--limit", "3",
               "--max-tokens", "16", "--no-probes", *threads,
               "--b-engine-arg", "tpot_ms=4.0", "-o", str(ab))
    assert r.returncode in (0, 1, 3), r.stderr
    assert "ledger: new ab" in r.stderr
    bench, baseline = root / "bench", root / "baseline"
    r = cli("--ledger", str(ledger), "bench", "--input-len", "16", "--output-len", "4",
               "--repeats", "2", *threads, "-o", str(bench))
    assert r.returncode == 0 and "ledger: new bench" in r.stderr, r.stderr
    r = cli("--ledger", str(ledger), "baseline", "record", "--input-len", "16",
               "--output-len", "4", "--repeats", "2", "--no-probes", *threads,
               "-o", str(baseline))
    assert r.returncode == 0 and "ledger: new baseline" in r.stderr, r.stderr
    return {"ledger": ledger, "ab": ab, "bench": bench, "baseline": baseline,
            **{f"run{k}": p for k, p in enumerate(runs)}}


def test_finished_commands_were_indexed(recorded: dict[str, Path]) -> None:
    with opened(recorded["ledger"]) as db:
        records = db.records()
        assert [r.kind for r in records] == ["run", "run", "run", "ab", "bench", "baseline"]
        assert {r.path for r in records} == {
            str(recorded[k].resolve())
            for k in ("run0", "run1", "run2", "ab", "bench", "baseline")}
        ab = records[3]
        for bench_like in records[4:]:
            (case,) = db.units_of(bench_like.id)
            assert case.name == "in16/out4" and case.metrics["steady_decode_tps"]["value"]
        comparison = json.loads((recorded["ab"] / "comparison.json").read_text())
        assert ab.decision == comparison["decision"]
        assert ab.verdicts.to_dict() == {"baseline": "A", "arms": {
            "B": comparison["comparisons"]["B"]["verdict"]["decision"]}}
        units = db.units_of(ab.id)
        assert [u.name for u in units] == ["A", "B"]
        assert units[0].config_digest != units[1].config_digest  # tpot_ms differs
        run_unit = db.units_of(records[0].id)[0]
        assert run_unit.config_digest == units[0].config_digest  # same engine config
        assert run_unit.engine == "fake" and run_unit.model_sha256
        assert records[0].git_commit and records[0].host
    # re-adding what the commands indexed changes nothing
    r = cli("ledger", "add", str(recorded["run0"]), str(recorded["ab"]),
               "--ledger", str(recorded["ledger"]))
    assert r.returncode == 0 and r.stdout.split()[0::4] == ["unchanged", "unchanged"]


def test_history_over_three_recorded_runs(recorded: dict[str, Path], tmp_path: Path) -> None:
    html = tmp_path / "history.html"
    r = cli("history", "steady_decode_tps", "--suite", "synthetic", "--json",
               "--html", str(html), "--ledger", str(recorded["ledger"]))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    runs = [s for s in doc["series"] if {p["kind"] for p in s["points"]} == {"run"}]
    (series,) = runs  # the three runs share engine, model, config and workload
    points = series["points"]
    assert len(points) == 3
    assert [p["started_at"] for p in points] == sorted(p["started_at"] for p in points)
    assert all(p["value"] and p["value"] > 0 and p["se"] is not None for p in points)
    assert all(p["evidence"] for p in points[1:])  # each later point is judged
    page = html.read_text()
    assert page.count('<svg class="plot"') == len(doc["series"])
    assert "step" in page and 'id="render-check"' in page
    r = cli("history", "accuracy", "--ledger", str(recorded["ledger"]))
    assert r.returncode == 0 and "step(s) flagged" in r.stdout


def test_compare_two_arms_reproduces_the_ab_comparison(recorded: dict[str, Path],
                                                       tmp_path: Path) -> None:
    ab = recorded["ab"]
    expected = json.loads((ab / "comparison.json").read_text())["comparisons"]["B"]
    for a_ref, b_ref in ((f"{ab}:A", f"{ab}:B"), (None, None)):
        if a_ref is None:  # the same through the ledger id
            with opened(recorded["ledger"]) as db:
                rid = db.by_path(str(ab.resolve()))[0].id[:12]
            a_ref, b_ref = f"@{rid}:A", f"@{rid}:B"
        out = tmp_path / "cmp.json"
        r = cli("compare", a_ref, b_ref, "-o", str(out), "--ledger",
                   str(recorded["ledger"]))
        assert r.returncode == expected["verdict"]["exit_code"], r.stderr
        got = json.loads(out.read_text())
        assert got["comparison"] == expected["comparison"]
        assert got["verdict"] == expected["verdict"]
        assert got["warning"] is None and got["interleaved"].startswith("yes")
        assert "NOT INTERLEAVED" not in r.stderr
        # the one switch flipped is the configuration's only difference
        conf = got["configuration"]
        assert conf["available"] and conf["unexplained"] == ["effective.tpot_ms",
                                                             "engine_args.tpot_ms"]
        assert "differs beyond --allow-diff: effective.tpot_ms" in r.stdout
    r = cli("compare", f"{ab}:A", f"{ab}:B", "-o", str(out),
               "--allow-diff", "engine_args.tpot_ms,effective.*")
    conf = json.loads(out.read_text())["configuration"]
    assert conf["unexplained"] == [] and conf["summary"] == (
        "exact match except effective.tpot_ms, engine_args.tpot_ms (allowed)")


def test_compare_arms_reversed_and_unmatched(recorded: dict[str, Path], tmp_path: Path) -> None:
    ab = recorded["ab"]
    expected = json.loads((ab / "comparison.json").read_text())["comparisons"]["B"]
    out = tmp_path / "reversed.json"
    r = cli("compare", f"{ab}:B", f"{ab}:A", "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr
    got = json.loads(out.read_text())
    assert got["arm_names"] == ["B", "A"] and got["interleaved"].startswith("yes")
    diff = got["comparison"]["quality"]["accuracy"]["diff"]["estimate"]
    assert diff == pytest.approx(-expected["comparison"]["quality"]["accuracy"]["diff"][
        "estimate"])
    assert got["comparison"]["agreement"]["measured"] is False
    # a 2-item run against a 3-item arm: keys in one side only are refused, not dropped
    r = cli("compare", str(recorded["run0"]), f"{ab}:A")
    assert r.returncode == 2 and "not matched" in r.stderr


def test_compare_separate_runs_warns(recorded: dict[str, Path]) -> None:
    r = cli("compare", str(recorded["run0"]), str(recorded["run1"]))
    assert r.returncode in (0, 1, 3), r.stderr
    assert "WARNING: NOT INTERLEAVED" in r.stderr and "3.7-5.4%" in r.stderr
    assert "configuration: exact match\n" in r.stdout  # one configuration, run twice
