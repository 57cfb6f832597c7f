"""The fast-path audit end to end (issue 24): one A/B in a throwaway git repository (a
declared switch, sampling, two seeds, the fast-path policy), its reviewer figures, the
engineer's decision and attaching the whole A/B directory to a later commit, on the
fake engine through the CLI in this process (a workflow: what it records and reports);
the fast-path policy on recorded A/Bs; and the shipped example on the embedded SmolLM2
(engine tier: flash attention is llama.cpp's), 2 items x 2 seeds of 8 tokens, nothing
asserting a figure of this CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from abgate.ab.analyze import analyze
from abgate.ab.decision import DECISIONS_FILE, arms_source, record_decision, relation
from abgate.errors import UsageError
from abgate.provenance.attach import AttachRefused, attach
from abgate.records.documents import AbRecord
from abgate.records.sections import GitState
from abgate.runner.documents import read_record
from tests.conftest import REPO, abgate, toml_engine_args
from tests.support.fake import cli
from tests.support.records import changed, edit_record
from tests.support.report import build_ab_dir

EXPERIMENT = """
name = "fast-path-audit"
baseline = "default"
policy = "fast-path"
[shared]
engine = "fake"
suite = "synthetic"
difficulty = "trivial"
limit = 2
seeds = [0, 1]
max_tokens = 8
temperature = 0.7
top_p = 0.9
engine_args = { n_ctx = 512 }
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
[arms.default]
[arms.fa]
changes = ["tpot_ms"]
engine_args = { tpot_ms = 4.0 }
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(repo, A/B dir): the A/B ran with the repo as its working directory, so every
    record carries the repo's clean commit and tree."""
    root = tmp_path_factory.mktemp("fastpath")
    repo = root / "repo"
    repo.mkdir()
    (repo / "kernel.c").write_text("int fast_path = 1;\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fast path on by default")
    exp = root / "exp.toml"
    exp.write_text(EXPERIMENT)
    out = root / "AB"
    r = cli("ab", str(exp), "-o", str(out), cwd=repo)
    assert r.returncode == 3, r.stderr  # 2 items: below min_items, INCONCLUSIVE
    return repo, out


def test_report_has_the_reviewers_figures(audited: tuple[Path, Path]) -> None:
    repo, out = audited
    tree, commit = git(repo, "rev-parse", "HEAD^{tree}"), git(repo, "rev-parse", "HEAD")
    md = (out / "report.md").read_text()
    assert f"| `fa` | `{commit}` | `{tree}` | no |" in md  # every arm's tree, clean
    assert f"| `default` | `{commit}` | `{tree}` | no |" in md
    assert "| `engine_args.tpot_ms` | before the load | (not set) | 4.0 | declared |" in md
    assert "| `effective.tpot_ms` | after the load | 5.0 | 4.0 | declared |" in md
    assert "| Arm | Correct | Invalid | Truncated | Natural stop | U+FFFD | NUL | Other control |" \
        in md
    rows = [line for line in md.splitlines() if line.startswith("| `fa` | ")]
    health = next(r for r in rows if " in " in r)  # the counts row: U+FFFD n in k sample(s)
    cells = [c.strip() for c in health.strip("|").split("|")]
    assert all(c.split("/")[1] == "4" for c in cells[1:5]), cells  # n/N over 2 x 2 samples
    assert cells[6].split()[0].isdigit() and cells[7].isdigit()  # NUL and other: counted
    assert "Steady decode tok/s, median" in md and "(plain)" in md and "(geo. mean)" in md
    assert "## What this evidence does not certify" in md
    assert "Policy: `fast-path`" in md
    doc = json.loads((out / "report.json").read_text())
    assert doc["arms"]["fa"]["git"]["tree"] == tree
    counts = doc["arms"]["fa"]["summary"]["quality"]["counts"]
    assert isinstance(counts["nul_chars"], int) and isinstance(counts["replacement_chars"], int)
    assert doc["differences"]["fa"]["request"]["undeclared"] == {}
    assert doc["not_certified"] and doc["decisions"] == []
    assert "fa" in (out / "report.html").read_text()


def test_decide_then_attach_the_whole_ab(audited: tuple[Path, Path], tmp_path: Path) -> None:
    # A copy: this test records a decision and commits to the repo, and the module's other
    # tests (in any order: pytest-randomly) read the audited A/B as it was written.
    repo, out = tmp_path / "repo", tmp_path / "AB"
    shutil.copytree(audited[0], repo, symlinks=True)
    shutil.copytree(audited[1], out, symlinks=True)
    ledger = {"ABGATE_LEDGER": str(tmp_path / "ledger.sqlite")}  # the shared one has the original
    bad = cli("decide", str(out), "--decision", "keep-default", "--why", "x")
    assert bad.returncode == 2 and "did you mean 'keep-default-on'" in bad.stderr
    assert not (out / DECISIONS_FILE).exists()
    r = cli("decide", str(out), "--decision", "keep-default-on", "--by", "lead", "--why",
               "task-accurate speedup; identity alone does not reject; GGML_NO_FA=1 opts out",
               env=ledger)
    assert r.returncode == 0, r.stderr
    (line,) = (out / DECISIONS_FILE).read_text().splitlines()
    decision = json.loads(line)
    assert decision["relation"] == "settles" and decision["machine_verdict"] == "INCONCLUSIVE"
    assert decision["source"]["tree"] == git(repo, "rev-parse", "HEAD^{tree}")
    assert "Engineer's decision: keep-default-on** (settles the machine verdict INCONCLUSIVE)" \
        in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["decisions"][0]["by"] == "lead"
    ls = cli("ledger", "ls", "--kind", "ab", env=ledger)
    assert "INCONCLUSIVE; decided keep-default-on" in " ".join(ls.stdout.split()), ls.stdout
    tested = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "merge: same tree")
    merged = git(repo, "rev-parse", "HEAD")
    r = cli("attach", str(out), "--commit", "HEAD", "--repo", str(repo))
    assert r.returncode == 0, r.stderr
    assert f"results of {tested[:12]} hold for HEAD ({merged[:12]})" in r.stdout
    (repo / "kernel.c").write_text("int fast_path = 0;\n")
    git(repo, "commit", "-qam", "revert the fast path")
    r = cli("attach", str(out), "--commit", "HEAD", "--repo", str(repo))
    assert r.returncode == 1 and "M kernel.c" in r.stderr


def test_attach_refuses_an_ab_whose_arms_ran_on_different_trees(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    one = {"commit": git(repo, "rev-parse", "HEAD"),
           "tree": git(repo, "rev-parse", "HEAD^{tree}"), "dirty": False}
    out = build_ab_dir(tmp_path / "AB")
    for path in [out / "ab.json", *sorted(out.glob("arms/*/run.json"))]:
        edit_record(path, git=GitState(**one))
    assert attach(out, "HEAD", repo).tree == one["tree"]
    run = out / "arms" / "fast" / "run.json"
    edit_record(run, git=GitState(**{**one, "dirty": True}))
    with pytest.raises(AttachRefused, match=r"arm 'fast' ran on a dirty tree"):
        attach(out, "HEAD", repo)
    with pytest.raises(UsageError, match=r"different source trees"):
        arms_source(out)
    edit_record(run, git=GitState(**{**one, "tree": "f" * 40}))
    with pytest.raises(AttachRefused, match=r"arms ran on different trees.*arm 'fast'"):
        attach(out, "HEAD", repo)


def test_decision_relations_and_refusals(tmp_path: Path) -> None:
    assert relation("keep-default-on", "ACCEPT") == "confirms"
    assert relation("revert", "ACCEPT") == "overrides"
    assert relation("make-opt-in", "REJECT") == "confirms"
    assert relation("keep-default-on", "REJECT") == "overrides"
    assert relation("revert", "INCONCLUSIVE") == "settles"
    out = build_ab_dir(tmp_path / "AB")  # ab.json has a commit, the arms none
    with pytest.raises(UsageError, match=r"different source trees.*arm 'base': commit None"):
        record_decision(out, "revert", "loops", arm="loopy")
    edit_record(out / "ab.json", git=None)
    with pytest.raises(UsageError, match=r"no git commit recorded"):
        record_decision(out, "revert", "loops", arm="loopy")
    with pytest.raises(UsageError, match=r"--why is empty"):
        record_decision(out, "revert", "  ")
    with pytest.raises(UsageError, match=r"--arm 'lopy' is not a candidate.*'loopy'"):
        record_decision(out, "revert", "loops", arm="lopy")
    edit_record(out / "ab.json", status="running")
    with pytest.raises(UsageError, match=r"recorded as running"):
        record_decision(out, "revert", "loops", arm="loopy")
    assert not (out / DECISIONS_FILE).exists()


def test_fast_path_policy_on_recorded_abs(tmp_path: Path) -> None:
    """The recorded fixture A/B: ``fast`` (10% faster, same answers, a tenth of its outputs
    token-different) and ``loopy`` (faster, but repetition loops)."""
    out = build_ab_dir(tmp_path / "AB")
    ab = read_record(out / "ab.json", "ab", model=AbRecord)
    edit_record(out / "ab.json",  # identity would reject ``fast``
                experiment=changed(ab.experiment, expect="lossless"))
    default = analyze(out, None, n_boot=500).comparisons
    assert default["fast"].verdict.decision == "REJECT"
    assert default["fast"].verdict.reasons[0].startswith("REJECT: lossless outputs")
    fast_path = analyze(out, "fast-path", n_boot=500)
    verdicts = fast_path.comparisons
    assert verdicts["fast"].verdict.decision == "ACCEPT"
    assert any("Reported, not deciding" in n for n in verdicts["fast"].verdict.notes)
    assert verdicts["loopy"].verdict.decision == "REJECT"
    assert fast_path.policy is not None and fast_path.policy.name == "fast-path"


@pytest.mark.engine
def test_example_experiment_small(tmp_path: Path) -> None:
    """examples/smollm2-fast-path.toml at 2 items x 2 seeds of 8 tokens: the declared
    switch and its setting are the only differences, before and after the load."""
    text = (REPO / "examples" / "smollm2-fast-path.toml").read_text()
    shared = "engine_args = { n_ctx = 1024 }"
    assert text.count(shared) == 1 and "seeds = [0, 1, 2]" in text and "temperature = 0.7" in text
    copy = tmp_path / "fast-path.toml"
    copy.write_text(text.replace(shared, f"engine_args = {toml_engine_args({'n_ctx': 1024})}"))
    out = tmp_path / "AB"
    r = abgate("ab", str(copy), "-o", str(out), "--limit", "2", "--seeds", "0,1",
               "--max-tokens", "8", "--warmup", "0", "--no-agreement", "--no-probes")
    assert r.returncode == 3, r.stderr
    entry = json.loads((out / "ab.json").read_text())["differences"]["fast"]
    assert set(entry["request"]["declared"]) == {"engine_args.flash_attn", "engine_args.type_v"}
    assert set(entry["loaded"]["declared"]) == {"effective.flash_attn", "effective.type_v"}
    assert entry["request"]["undeclared"] == {} == entry["loaded"]["undeclared"]
    assert json.loads((out / "comparison.json").read_text())["policy"]["name"] == "fast-path"
