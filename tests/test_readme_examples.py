"""The README's examples run as written: every ``abgate`` command in its code blocks
parses against the real CLI (options, arguments and their types), and the chain of
them that needs no other data, model or server is executed in a fresh directory laid
out like a checkout (``examples/`` and ``../shared`` where the README expects them). Its
first run is the acceptance run, and its A/B of the shipped example the engine tier's one
end-to-end run of that example."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from abgate.cli import app
from tests.conftest import GSM8K, REPO, abgate, read_lines, thread_flags, toml_engine_args
from tests.support.fake import cli


def readme_commands() -> list[str]:
    """Every ``abgate ...`` line of the README's bash blocks, continuations joined and
    comments dropped."""
    text = (REPO / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)\n```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "abgate":
                out.append(shlex.join(words))
    return out


def _parse(args: list[str]) -> None:
    """Parse ``abgate ARGS`` down to its (sub)command as the CLI would, running
    nothing: an unknown option, a missing argument or a bad value raises."""
    cmd: Any = get_command(app)
    ctx = cmd.make_context("abgate", list(args))
    while hasattr(cmd, "commands"):
        protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
        rest = [*protected, *ctx.args]
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, rest, parent=ctx)


def test_the_readme_has_the_examples_this_file_runs() -> None:
    commands = readme_commands()
    assert len(commands) >= 20
    for line in EXECUTED:
        assert line in commands, line


def test_every_readme_command_parses_as_written() -> None:
    checked = 0
    for line in readme_commands():
        words = shlex.split(line)[1:]
        if "..." in words:  # "abgate run ... --contract C": a placeholder for options
            words = [w for w in words if w != "..."]
        _parse(words)
        checked += 1
    assert checked == len(readme_commands())


# Executed in this order, verbatim but for the additions in SHRINK (fewer items and
# tokens), the example file's speed cases and probes made smaller (BENCH, PROBES: the
# same sections, shorter prompts and outputs) and, where ABGATE_TEST_THREADS is set, a
# pinned thread count (run's --engine-arg flags; the example file's shared engine args).
EXECUTED = [
    "abgate run --suite gsm8k --data ../shared/data/gsm8k/test.jsonl --limit 4 --seeds 0,1 "
    "--max-tokens 64 -o runs/R",
    "abgate run --resume runs/R",
    "abgate ab examples/smollm2-kv-q8.toml -o runs/kv",
    "abgate report runs/kv --format html -o kv.html",
    "abgate compare runs/kv:f16 runs/kv:q8",
    "abgate extract 'so the answer is \\boxed{1,234}'",
    "abgate ledger ls",
    "abgate history steady_decode_tps --model SmolLM2 --html history.html",
]
SHRINK = {"abgate ab examples/smollm2-kv-q8.toml -o runs/kv":
          ["--limit", "3", "--max-tokens", "16", "--warmup", "1"],
          EXECUTED[0]: ["--max-tokens", "24"]}  # the last --max-tokens is the one
BENCH = ("input_len = [256]\noutput_len = 64\nrepeats = 3\n",
         "input_len = [64]\noutput_len = 8\nrepeats = 2\n")
PROBES = "\n[evidence]\nprobe_len = 128\n"  # the default is 512
EXIT = {"abgate ab examples/smollm2-kv-q8.toml -o runs/kv": 3,  # 3 items decide nothing
        "abgate compare runs/kv:f16 runs/kv:q8": 3}  # and so the same statistics again
# The commands that read records and load no engine run through the CLI in this process
# (tests.support.fake.cli: the same main(), argv, cwd and env), not an interpreter each;
# the run and the A/B, which load llama.cpp, as subprocesses, as a user runs them.
SUBPROCESS = {EXECUTED[0], "abgate ab examples/smollm2-kv-q8.toml -o runs/kv"}


def _check_the_acceptance_run(out: Path, stderr: str) -> None:
    """The README's first run is the acceptance run (was test_run_cli's
    test_acceptance_run_writes_8_samples, the same command): 4 GSM8K items x 2 seeds, 8
    samples, each (item, seed) once, the record's and samples' shape, greedy seeds giving
    one output per item, the summary, and plain progress lines (stderr and run.log). What
    the model answers is this CPU's; the record's shape is not."""
    samples = read_lines(out / "samples.jsonl")
    assert len(samples) == 8
    assert len({(s["item_id"], s["seed"]) for s in samples}) == 8
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and run["schema_version"] == 2
    assert run["spec"]["model"]["sha256"] and len(run["spec"]["item_ids"]) == 4
    assert run["spec"]["suite"]["data_sha256"] and run["spec"]["seeds"] == [0, 1]
    assert run["engine"]["name"] == "llamacpp" and run["engine"]["effective"]["n_ctx"]
    assert run["host"]["cores_logical"] >= 1 and run["abgate_version"]
    for s in samples:
        assert s["output"]["token_ids"] and s["prompt"]["sha256"] and s["finish_reason"] in (
            "stop", "length")
        assert s["timing"]["ttft_s"] > 0 and s["extracted"] is not None
        assert s["correct"] == (s["extracted"]["value"] == s["reference"])
    by_item: dict[object, set[str]] = {}
    for s in samples:  # greedy: both seeds give the same tokens in one process
        by_item.setdefault(s["item_id"], set()).add(s["output"]["sha256"])
    assert all(len(shas) == 1 for shas in by_item.values()), by_item
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 8 and summary["quality"]["n"] == 8
    assert summary["speed"]["steady_decode_tps"]["n"] > 0
    progress = [x for x in stderr.splitlines() if x.startswith("abgate: run R: ")]
    assert progress[0] == "abgate: run R: 0/8 done, starting"
    assert progress[-1].startswith("abgate: run R: 8/8 (100%), ") and "tok/s" in progress[-1]
    assert "ETA" in progress[1] and progress[-1].removeprefix("abgate: ") in (
        out / "run.log").read_text()


def _check_the_example_ab(out: Path, stderr: str) -> None:
    """The shipped example's A/B on the real engine (was test_ab_run's
    test_example_ab_small, the same run): its schedule, each arm's effective KV type,
    one warm-up per arm, matched prompts, the speed cases and probes of each arm,
    INCONCLUSIVE on 3 items, and plain progress lines on a non-terminal stderr (the
    samples, then the scoring pass). Which gates a
    change trips, the accuracies and the tokens are figures of this CPU's SIMD paths and
    thread count: not asserted."""
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "complete" and ab["schedule"]["mode"] == "interleave"
    executed = ab["schedule"]["executed"]
    assert [e.split(":")[0] for e in executed] == ["f16", "q8", "q8", "f16", "f16", "q8"]
    for arm, type_k in (("q8", "q8_0"), ("f16", "f16")):  # the arm's effective facet
        run = json.loads((out / "arms" / arm / "run.json").read_text())
        assert run["engine"]["effective"]["type_k"] == type_k
        assert run["kind"] == "ab-arm"
        lines = read_lines(out / "arms" / arm / "samples.jsonl")
        assert sum(1 for s in lines if s["warmup"]) == 1 and len(lines) == 4
    a, b = ([s for s in read_lines(out / "arms" / arm / "samples.jsonl") if not s["warmup"]]
            for arm in ("f16", "q8"))
    assert [s["prompt"]["sha256"] for s in a] == [s["prompt"]["sha256"] for s in b]
    for arm in ("f16", "q8"):  # the example's speed cases and probes, in each arm
        bench = json.loads((out / "arms" / arm / "bench.json").read_text())
        assert bench["plan"]["input_len"] == [64] and len(bench["cases"]) == 1
        assert len(bench["cases"][0]["output_token_ids"]) == 8
        probes = json.loads((out / "arms" / arm / "probes.json").read_text())["probes"]
        assert {p["name"] for p in probes} >= {"arithmetic", "copy"}
    comp = json.loads((out / "comparison.json").read_text())
    assert comp["decision"] == "INCONCLUSIVE" and comp["exit_code"] == 3
    assert comp["comparisons"]["q8"]["comparison"]["probes"]["measured"]
    assert comp["comparisons"]["q8"]["comparison"]["n_pairs"] == 3
    lines = stderr.splitlines()
    assert any(x.startswith("abgate: ab kv: 6/6 (100%), ") for x in lines), stderr
    assert any(x.startswith("abgate: ab kv scoring q8 against f16: 3/3 (100%), ")
               for x in lines), stderr


@pytest.mark.engine
@pytest.mark.cost(17)
def test_readme_examples_run_as_written(tmp_path: Path, gsm8k_path: Path) -> None:
    assert gsm8k_path == GSM8K
    work = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", work / "examples")
    exp = work / "examples" / "smollm2-kv-q8.toml"  # ABGATE_TEST_THREADS pins its threads
    shared = "engine_args = { n_ctx = 1024 }"
    assert exp.read_text().count(shared) == 1
    assert exp.read_text().count(BENCH[0]) == 1 and "[evidence]" not in exp.read_text()
    exp.write_text(exp.read_text().replace(
        shared, f"engine_args = {toml_engine_args({'n_ctx': 1024})}").replace(*BENCH)
        + PROBES)
    (tmp_path / "shared").symlink_to(GSM8K.parents[2])  # ../shared beside the checkout
    env = {"ABGATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    outputs = {}
    for line in EXECUTED:
        args = shlex.split(line)[1:] + SHRINK.get(line, [])
        if args[0] == "run" and "--resume" not in args:
            args += thread_flags()
        run = abgate if line in SUBPROCESS else cli
        r = run(*args, env=env, cwd=work)
        assert r.returncode == EXIT.get(line, 0), (line, r.stdout[-2000:], r.stderr[-2000:])
        outputs[line] = r
    _check_the_acceptance_run(work / "runs" / "R", outputs[EXECUTED[0]].stderr)
    _check_the_example_ab(work / "runs" / "kv",
                          outputs["abgate ab examples/smollm2-kv-q8.toml -o runs/kv"].stderr)
    assert len(json.loads((work / "runs/R/run.json").read_text())["spec"]["item_ids"]) == 4
    assert "already complete" in outputs["abgate run --resume runs/R"].stderr
    assert (work / "kv.html").read_text().startswith("<!DOCTYPE html>")
    assert "q8" in outputs["abgate compare runs/kv:f16 runs/kv:q8"].stdout
    assert "1234" in outputs["abgate extract 'so the answer is \\boxed{1,234}'"].stdout
    ls = outputs["abgate ledger ls"].stdout
    assert "runs/R" in ls or str(work / "runs" / "R") in ls, ls
    assert (work / "history.html").exists()


def test_the_first_set_up_command_runs_a_shipped_example() -> None:
    """README's first command ends in ``abgate ab <example> ...``: that part parses
    against the real CLI and its experiment file loads (every key, every arm checked)."""
    from abgate.ab.experiment import load_experiment

    first = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)[0]
    job = shlex.split(first.split("&&")[-1])
    assert job[:2] == ["abgate", "ab"], first
    _parse(job[1:])
    exp = load_experiment(REPO / job[2])
    assert exp.baseline in exp.arms and len(exp.arms) == 2
