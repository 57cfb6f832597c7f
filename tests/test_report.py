"""Reports of an A/B directory: Markdown, JSON and HTML from saved records only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from abgate.records.bench_sections import SpeedDistributions
from abgate.records.sections import Distribution
from abgate.records.side_documents import AbBenchCase, AbBenchDocument
from abgate.report import render, write_reports
from abgate.runner.documents import write_record
from tests.conftest import abgate
from tests.support.report import build_ab_dir

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
N_PLOTS = 2 + 3 * 2  # speed + accuracy, then ratio/length/repetition per candidate


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_ab_dir(tmp_path_factory.mktemp("report") / "ab")
    write_reports(out)
    return out


@pytest.fixture(scope="module")
def markdown(ab_dir: Path) -> str:
    return (ab_dir / "report.md").read_text()


@pytest.fixture(scope="module")
def html(ab_dir: Path) -> str:
    return (ab_dir / "report.html").read_text()


def _comparison(ab_dir: Path) -> dict[str, object]:
    doc = json.loads((ab_dir / "comparison.json").read_text())
    assert isinstance(doc, dict)
    return doc


def test_write_reports_writes_three_files(tmp_path: Path) -> None:
    out = build_ab_dir(tmp_path / "ab")
    paths = write_reports(out)
    assert [p.name for p in paths] == ["report.md", "report.json", "report.html"]
    assert all(p.parent == out and p.stat().st_size > 0 for p in paths)
    assert not list(out.glob("*.tmp"))


def test_markdown_is_an_audit_record(ab_dir: Path, markdown: str) -> None:
    comparison = _comparison(ab_dir)
    assert "**Decision: REJECT** (exit code 1)" in markdown
    assert "### Verdict: ACCEPT" in markdown and "### Verdict: REJECT" in markdown
    for entry in comparison["comparisons"].values():  # type: ignore[attr-defined]
        for gate in entry["verdict"]["gates"]:
            assert f"| `{gate['name']}` | {gate['outcome']} |" in markdown
            assert gate["evidence"].split(";")[0] in markdown
    for heading in ("## Setup", "## Matched contract", "## Per-arm results",
                    "## fast vs base", "## loopy vs base", "### Deltas (fast − base)",
                    "### Diagnostics", "## Outliers", "## What this evidence does not certify"):
        assert heading in markdown


def test_markdown_matched_contract(markdown: str) -> None:
    held = markdown.split("## Matched contract")[1].split("What differed")[0]
    assert "| model | `tiny-test.gguf` (sha256 abababababab) |" in held
    for facet in ("suite", "items", "seeds", "sampling", "prompt"):
        assert f"| {facet} |" in held
    assert "40 of 500" in held and "max_tokens=256, temperature=0.0" in held
    differed = markdown.split("What differed between the arms:")[1].split("## ")[0]
    assert "| engine arg `flash_attn` | (not set) | true | (not set) |" in differed
    assert "| effective `type_k` | f16 | f16 | q4_0 |" in differed
    assert "n_ctx" not in differed  # held equal, not a difference


def test_markdown_tables_diagnostics_and_limits(markdown: str) -> None:
    assert "| `base` (baseline) | 80 | 40 | 70.0% ±" in markdown
    assert "Token-identical outputs: **72/80** pairs" in markdown
    assert "item-0000#0: 40 tokens / rep 0.050 -> 256 / 0.620, became wrong" in markdown
    assert "| `loopy` | `item-0000#0` | 256 | 0.620 | no |" in markdown
    limits = markdown.split("## What this evidence does not certify")[1]
    assert re.search(r"an accuracy regression smaller than \*\*\d+\.\d points\*\* cannot be "
                     r"excluded at this sample size \(40 items", limits)
    assert "One machine: `testhost`" in limits and "One suite: synthetic" in limits


def test_json_report(ab_dir: Path) -> None:
    doc = json.loads((ab_dir / "report.json").read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "ab-report"
    assert doc["decision"] == "REJECT" and doc["exit_code"] == 1
    assert doc["verdicts"] == {"fast": "ACCEPT", "loopy": "REJECT"}
    assert doc["comparison"] == _comparison(ab_dir)
    assert list(doc["arms"]) == ["base", "fast", "loopy"]
    assert doc["arms"]["loopy"]["summary"]["quality"]["n_error"] == 1
    assert doc["run"]["schedule"]["n_executed"] == 240
    assert doc["contract"]["differed"]["engine arg `type_k`"]["loopy"] == "q4_0"
    assert doc["experiment"]["baseline"] == "base"


def test_html_is_self_contained_with_plots(html: str) -> None:
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?:|//cdn|<link\b|\bsrc=|@import|url\(", html)
    assert html.count('<svg class="plot"') == N_PLOTS
    for plot in ("plot-speed-steady_decode_tps", "plot-accuracy", "plot-ratio-1",
                 "plot-length-2", "plot-repetition-2"):
        assert f'id="{plot}"' in html
    assert f'data-expected="{N_PLOTS}"' in html
    assert "<style>" in html and "Decision: <strong>REJECT</strong>" in html


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}",
           "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                    "(apt-get install chromium; .ci/run installs it)")
def test_html_renders_in_headless_chromium(ab_dir: Path, tmp_path: Path) -> None:
    page = (ab_dir / "report.html").resolve().as_uri()
    # at a 1400 px window: the page's own check also verifies its layout (every plot
    # label inside its plot and clear of the others; no table needing a scrollbar)
    res = _chromium("--window-size=1400,2400", "--dump-dom", page, tmp=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    console = [line for line in res.stderr.splitlines()
               if ":CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    check = re.search(r'<p id="render-check"[^>]*>', res.stdout)
    assert check is not None, res.stdout[-2000:]
    assert 'data-status="ok"' in check.group(0), check.group(0)
    assert 'data-overflowing-tables=""' in check.group(0), check.group(0)
    assert f'data-plots="{N_PLOTS}"' in check.group(0)
    assert res.stdout.count('class="mark dot"') > 300  # the scatter and strip points
    shot = Path(os.environ.get("ABGATE_SCREENSHOT_DIR", tmp_path)) / "report.png"
    _chromium("--window-size=1400,6000", f"--screenshot={shot}", page, tmp=tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerendering_is_byte_identical(ab_dir: Path, tmp_path: Path) -> None:
    before = {n: (ab_dir / n).read_bytes() for n in ("report.md", "report.json", "report.html")}
    copy = tmp_path / "elsewhere"
    shutil.copytree(ab_dir, copy)
    write_reports(copy)
    for name, data in before.items():
        assert (copy / name).read_bytes() == data, name


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    from abgate.cli import main

    monkeypatch.setattr(sys, "argv", ["abgate", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code or 0)


@pytest.mark.parametrize("fmt", ["md", "json", "html"])
def test_cli_prints_each_format(ab_dir: Path, fmt: str, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, "report", str(ab_dir), "--format", fmt) == 0
    out = capsys.readouterr().out
    assert out == (ab_dir / f"report.{fmt}").read_text()


def test_cli_writes_file(ab_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "r.html"
    assert _main(monkeypatch, "report", str(ab_dir), "--format", "html", "-o",
                 str(target)) == 0
    assert target.read_text() == render(ab_dir, "html")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("make", ["missing", "empty", "no-comparison", "corrupt"])
def test_cli_bad_dir_is_one_line_exit_2(ab_dir: Path, tmp_path: Path, make: str,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "ab"
    if make != "missing":
        target.mkdir()
    if make in ("no-comparison", "corrupt"):
        shutil.copy(ab_dir / "ab.json", target / "ab.json")
    if make == "corrupt":
        (target / "comparison.json").write_text("{not json")
    assert _main(monkeypatch, "report", str(target)) == 2
    err = capsys.readouterr().err
    assert err.startswith("abgate: error: ") and err.count("\n") == 1, err


def test_cli_subprocess_errors(tmp_path: Path) -> None:
    res = abgate("report", str(tmp_path / "nope"), "--format", "md", timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().count("\n") == 0
    assert "no such A/B directory" in res.stderr
    res = abgate("report", str(tmp_path), "--format", "pdf", timeout=120)
    assert res.returncode == 2 and "unknown report format 'pdf'" in res.stderr


def test_missing_keys_and_files_still_render(ab_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab"
    shutil.copytree(ab_dir, out)
    comparison = _comparison(out)
    for entry in comparison["comparisons"].values():  # type: ignore[attr-defined]
        for key in ("diagnostics", "mde", "speed", "bootstrap"):
            entry["comparison"].pop(key)
        entry["verdict"].pop("gates")
    (out / "comparison.json").write_text(json.dumps(comparison))
    (out / "arms" / "fast" / "summary.json").unlink()  # rebuilt from the samples
    shutil.rmtree(out / "arms" / "loopy")  # an arm that never ran
    for fmt in ("md", "json", "html"):
        assert render(out, fmt)
    md = render(out, "md")
    assert "No gates were recorded" in md and "| `fast` | 80 | 40 | 70.0% ±" in md


def test_bench_results_are_rendered_side_by_side(ab_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab"
    shutil.copytree(ab_dir, out)
    for arm, tps in (("base", 40.0), ("fast", 44.0)):
        case = AbBenchCase(input_len=512, output_len=128, prompt_sha256="0" * 64,
                           speed=SpeedDistributions(
                               steady_decode_tps=Distribution(median=tps),
                               ttft_s=Distribution(median=0.25)))
        write_record(out / "arms" / arm / "bench.json", AbBenchDocument.new(
            plan={"input_len": [512], "output_len": 128}, cases=[case]))
    md = render(out, "md")
    assert "## Bench (fixed-length prompts)" in md
    assert "| 512/128 | 40.00 | 250.0 | 44.00 | 250.0 |" in md
    assert "## Bench" not in render(ab_dir, "md")


def test_lower_is_better_policy_metric(ab_dir: Path, tmp_path: Path) -> None:
    from abgate.ab.analyze import analyze

    out = tmp_path / "ab"
    shutil.copytree(ab_dir, out)
    policy = tmp_path / "ttft.toml"
    policy.write_text('[speed]\nmetric = "ttft_s"\n')
    analyze(out, policy_path=str(policy), n_boot=200)
    html = render(out, "html")
    assert html.count('<svg class="plot"') == N_PLOTS + 1
    assert 'id="plot-speed-ttft_s"' in html and "speedup on TTFT (s)" in html
    assert "a true TTFT (s) change smaller than" in render(out, "md")


def test_weights_diff_is_rendered_as_a_diagnostic(tmp_path: Path,
                                                  smollm2_self_diff: dict[str, object]) -> None:
    import shutil

    from abgate.report import render

    src = tmp_path / "src"
    build_ab_dir(src)
    (src / "weights-diff-fast.json").write_text(json.dumps(smollm2_self_diff))
    md = render(src, "md")  # SmolLM2's diff is no arm's model here: marked, not shown
    assert "## Weights: weights-diff-fast.json (not this A/B's)" in md
    assert "272 tensors compared" not in md
    arm_sha = json.loads((src / "arms" / "base" / "run.json").read_text())["spec"]["model"]
    doc = {**smollm2_self_diff}
    for side in ("ref", "other"):  # the arms' model: shown, by file name, not its path
        doc[side] = {**doc[side], "sha256": arm_sha["sha256"]}  # type: ignore[dict-item]
    (src / "weights-diff-fast.json").write_text(json.dumps(doc))
    md = render(src, "md")
    assert "## Weight diagnostics" in md and "weights-diff-fast.json" in md
    assert "272 tensors compared" in md and "(not this A/B's)" not in md
    assert "`SmolLM2-135M-Instruct.Q4_1.gguf` (sha256" in md and "site-packages" not in md
    shutil.rmtree(src)
