"""After the load, an A/B tells a switch the engine reports from one that only touched the
model config. Found on the H200 with real vLLM 0.26 (benchmarks/gpu_vllm.py baseline-repro,
issue 35): arm b's ``hf_overrides={rope_theta=1.0}`` was refused as undeclared differences
after the load — the model config's digest, the request's echo and the KV blocks vLLM's
profiler computed (99,748 vs 99,577) — so the A/B never ran. Now the echo and the digest
follow the declared engine arg, the KV blocks are volatile (shown, never a difference), and
a switch whose only trace is the digest, with token-identical outputs, is a note."""

from __future__ import annotations

import json
from pathlib import Path

import numpy.random  # noqa: F401  (mapped before the first arm loads, as in a later run)

from abgate.ab.declared import _split_loaded
from abgate.records.sections import DiffStage
from tests.support.fake import cli, experiment

DECLARED = DiffStage(declared={"engine_args.hf_overrides": ["(not set)", '{"rope_theta": 1.0}']})
VLLM_AFTER_LOAD = {  # what the H200 run's refusal listed, key -> [a, b]
    "effective.hf_config_sha256": ["e5bd4a76", "0ca60a2f"],
    "effective.num_gpu_blocks": ["99748", "99577"],
    "effective.requested_engine_args": ['{"dtype": "bfloat16"}',
                                        '{"dtype": "bfloat16", "hf_overrides": {}}'],
}


def test_the_vllm_refusal_from_the_h200_is_no_undeclared_difference() -> None:
    known, unknown, moving = _split_loaded(dict(VLLM_AFTER_LOAD), ["hf_overrides"], DECLARED)
    assert unknown == {}
    assert set(known) == {"effective.hf_config_sha256", "effective.requested_engine_args"}
    assert moving == {"effective.num_gpu_blocks": ["99748", "99577"]}


def test_without_a_declared_engine_arg_the_digest_is_undeclared() -> None:
    env_only = DiffStage(declared={"env.X": ["(not set)", "1"]})
    _, unknown, _ = _split_loaded(dict(VLLM_AFTER_LOAD), ["env.X"], env_only)
    assert set(unknown) == {"effective.hf_config_sha256", "effective.requested_engine_args"}


def test_a_config_only_switch_with_identical_outputs_is_a_note(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "config_override = { rope_theta = 1.0 }", limit=4)
    exp.write_text(exp.read_text().replace("[arms.b]\n",
                                           "[arms.b]\nchanges = [\"config_override\"]\n"))
    out = tmp_path / "ab"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode in (0, 1, 3), r.stderr + r.stdout  # ran: not refused (exit 2)
    entry = json.loads((out / "ab.json").read_text())["differences"]["b"]
    assert entry["config_only"] == ["engine_args.config_override"]
    assert "effective.hf_config_sha256" in entry["loaded"]["declared"]
    notes = json.loads((out / "comparison.json").read_text())["comparisons"]["b"]["verdict"][
        "notes"]
    assert any("changed only the model config's digest" in n and "all 4 items" in n
               for n in notes), notes


def test_a_config_switch_that_changes_outputs_is_no_note(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.toml", "config_override = { x = 1 }, perturb = 4.0",
                     limit=4)
    out = tmp_path / "ab"
    cli("ab", str(exp), "-o", str(out))
    notes = json.loads((out / "comparison.json").read_text())["comparisons"]["b"]["verdict"][
        "notes"]
    assert not any("changed only the model config's digest" in n for n in notes)
