"""Contracts and manifests on ``bench``, ``baseline record`` and ``baseline check``:
checked before the load (exit 2, nothing written) and on the engine as loaded; a
manifest made at another tree is refused, or recorded as stale when allowed. Workflow
logic: on the fake engine, through the CLI in this process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.fake import cli

TINY = ["--engine", "fake", "--input-len", "16", "--output-len", "2", "--repeats", "1",
        "--warmup", "0"]
BENCH = ["bench", *TINY, "--peak-bw", "10"]
BASELINE = ["baseline", "record", *TINY, "--no-probes"]


def contract(tmp_path: Path, text: str) -> str:
    path = tmp_path / "contract.toml"
    path.write_text(text)
    return str(path)


def test_bench_contract_refuses_the_request_before_loading(tmp_path: Path) -> None:
    c = contract(tmp_path, '[engine_args]\nforbidden = ["perturb"]\n')
    for cmd in (BENCH, BASELINE):
        out = tmp_path / cmd[0]
        r = cli(*cmd, "--engine-arg", "perturb=1.0", "--contract", c, "-o", str(out))
        assert r.returncode == 2 and "perturb" in r.stderr, r.stderr
        assert not out.exists()


def test_bench_contract_checked_after_load(tmp_path: Path) -> None:
    holds = contract(tmp_path, 'engine = "fake"\n[settings]\nn_ctx = 512\n')
    out = tmp_path / "ok"
    r = cli(*BENCH, "--engine-arg", "n_ctx=512", "--contract", holds, "-o", str(out))
    assert r.returncode == 0, r.stderr
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert prov["contract"]["passed"] is True and prov["libraries"] and prov["environment"]
    assert set(prov["contract"]["checked"]) == {"request", "effective", "libraries"}
    broken = tmp_path / "broken"
    broken.mkdir()
    c = contract(broken, "[settings]\nn_ctx = 2048\n")  # n_ctx left to the engine: 4096
    r = cli(*BENCH, "--contract", c, "-o", str(tmp_path / "B"))
    assert r.returncode == 1 and "n_ctx" in r.stderr
    run = json.loads((tmp_path / "B" / "run.json").read_text())
    assert run["status"] == "failed" and run["provenance"]["contract"]["passed"] is False


def test_baseline_record_and_check_take_a_contract(tmp_path: Path) -> None:
    holds = contract(tmp_path, "[settings]\nn_ctx = 512\n")
    base = tmp_path / "BL"
    r = cli(*BASELINE, "--engine-arg", "n_ctx=512", "--contract", holds, "-o", str(base))
    assert r.returncode == 0, r.stderr
    doc = json.loads((base / "baseline.json").read_text())
    assert doc["provenance"]["contract"]["passed"] is True
    report = tmp_path / "check.json"
    r = cli("baseline", "check", str(base), "--tolerance", "1", "--contract", holds,
               "--json", str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(report.read_text())["provenance"]["contract"]["passed"] is True
    other = tmp_path / "other"
    other.mkdir()
    r = cli("baseline", "check", str(base), "--tolerance", "1",
               "--contract", contract(other, "[settings]\nn_ctx = 1024\n"))
    # the recorded request asks for n_ctx=512: refused before the load
    assert r.returncode == 2 and "n_ctx" in r.stderr


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_a_stale_manifest_is_refused_or_recorded_stale(tmp_path: Path) -> None:
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "a.c").write_text("int main(){}\n")
    git(repo, "init", "-q")
    git(repo, "add", "a.c")
    git(repo, "commit", "-qm", "one")
    man = repo / "manifest.json"
    assert cli("manifest", "build", "--root", str(repo), "-o", str(man)).returncode == 0
    fresh = tmp_path / "fresh"
    r = cli(*BENCH, "--manifest", str(man), "-o", str(fresh), cwd=repo)
    assert r.returncode == 0, r.stderr
    recorded = json.loads((fresh / "run.json").read_text())["provenance"]["manifest"]
    assert recorded["stale"] is False and recorded["freshness"]["checked"]
    (repo / "a.c").write_text("int main(){return 1;}\n")  # an edit after the manifest
    git(repo, "commit", "-qam", "two")
    stale = tmp_path / "stale"
    r = cli(*BENCH, "--manifest", str(man), "-o", str(stale), cwd=repo)
    assert r.returncode == 2 and "stale" in r.stderr and "tree" in r.stderr, r.stderr
    assert not stale.exists()
    r = cli(*BENCH, "--manifest", str(man), "--allow-stale-manifest", "-o", str(stale),
               cwd=repo)
    assert r.returncode == 0, r.stderr
    recorded = json.loads((stale / "run.json").read_text())["provenance"]["manifest"]
    assert recorded["stale"] is True and any(d.startswith("tree ")
                                             for d in recorded["freshness"]["differences"])


def test_baseline_and_bench_directories_attach_to_a_commit_with_the_same_tree(
        tmp_path: Path) -> None:
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "a.c").write_text("int main(){}\n")
    git(repo, "init", "-q")
    git(repo, "add", "a.c")
    git(repo, "commit", "-qm", "measured")
    base, bench = tmp_path / "BL", tmp_path / "B"  # outside the checkout: it stays clean
    assert cli(*BASELINE, "-o", str(base), cwd=repo).returncode == 0
    assert cli(*BENCH, "-o", str(bench), cwd=repo).returncode == 0
    git(repo, "commit", "-q", "--allow-empty", "-m", "merge: same tree")
    for result in (base, bench):
        r = cli("attach", str(result), "--commit", "HEAD", "--repo", str(repo))
        assert r.returncode == 0 and "identical tree" in r.stdout, r.stdout + r.stderr
        (line,) = (result / "attachments.jsonl").read_text().splitlines()
        assert json.loads(line)["tested_commit_from"].endswith("git.commit")
    (repo / "a.c").write_text("int main(){return 2;}\n")
    git(repo, "commit", "-qam", "another tree")
    r = cli("attach", str(base), "--commit", "HEAD", "--repo", str(repo))
    assert r.returncode == 1 and "a.c" in r.stdout + r.stderr
