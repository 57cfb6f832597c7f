"""Declared differences between A/B arms, and contracts on every arm (issue 24, items 1-2).

The engine tests run the embedded SmolLM2 on two items and a few tokens where a
difference only llama.cpp's load shows is the point (n_batch clamped to n_ctx); they
assert refusals, the keys named and what is recorded, never figures of this CPU. The
rest runs on the fake engine through the CLI in this process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from abgate.ab import analyze, checks, declared
from abgate.ab.experiment import parse_experiment
from abgate.errors import UsageError
from tests.conftest import abgate, engine_refused, no_engine_env, read_lines, toml_engine_args
from tests.support.fake import cli, fake_loads


def experiment(base: dict[str, object], cand: str, *, shared: dict[str, object] | None = None,
               top: str = "", engine: str = "llamacpp") -> str:
    args = toml_engine_args(shared or {"n_ctx": 512}) if engine == "llamacpp" else \
        "{ n_ctx = 512 }"
    return f"""{top}
name = "declared"
baseline = "base"
[shared]
engine = "{engine}"
suite = "synthetic"
difficulty = "trivial"
limit = 2
max_tokens = 8
engine_args = {args}
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
[arms.base]
{"".join(f"{k} = {json.dumps(v)}" + chr(10) for k, v in base.items())}
[arms.cand]
{cand}
"""


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_patterns_match_bare_names_and_classes() -> None:
    assert declared.matches("engine_args.flash_attn", ["flash_attn"])
    assert declared.matches("effective.flash_attn", ["flash_attn"])
    assert declared.matches("env.GGML_NO_FA", ["env.*"])
    assert not declared.matches("engine_args.n_ctx", ["flash_attn", "env.*"])
    assert not declared.matches("effective.type_k", ["engine_args.type_k"])
    assert checks.clause_keys("settings.type_k") == ["engine_args.type_k", "effective.type_k"]
    assert checks.clause_keys("env.forbidden.LD_PRELOAD") == ["env.LD_PRELOAD"]
    exempt = checks.exemption(["type_k"])
    assert exempt is not None and exempt("settings.type_k") and not exempt("settings.n_ctx")


def test_declarations_parse_and_round_trip() -> None:
    doc = {"allow_differences": ["env.*"], "arms": {"a": {}, "b": {
        "changes": ["flash_attn"], "engine_args": {"flash_attn": True}}}}
    exp = parse_experiment(doc, "x.toml")
    assert exp.changes == {"b": ("flash_attn",)} and exp.declares
    assert exp.declared_for("b") == ("flash_attn", "env.*")
    assert "changes" not in exp.arms["b"].to_dict()
    back = type(exp).from_dict(json.loads(json.dumps(exp.to_dict())))
    assert back == exp
    plain = parse_experiment({"arms": {"a": {}, "b": {}}}, "y.toml")
    assert "changes" not in plain.to_dict() and not plain.declares  # digests stay the same


@pytest.mark.parametrize(("doc", "pattern"), [
    ({"arms": {"a": {}, "b": {"changes": "flash_attn"}}}, r"\[arms.b\] changes: must be a list"),
    ({"arms": {"a": {}, "b": {"changes": ["engine_arg.n_ctx"]}}},
     r"unknown key group 'engine_arg'"),
    ({"allow_differences": [3], "arms": {"a": {}, "b": {}}}, r"allow_differences: must be"),
])
def test_bad_declarations_are_one_line_errors(doc: dict[str, object], pattern: str) -> None:
    with pytest.raises(UsageError, match=pattern):
        parse_experiment(doc, "x.toml")


def test_undeclared_second_switch_refused_before_anything(tmp_path: Path) -> None:
    """Two switches flipped, one declared: exit 2 naming the other, before any load and
    before the A/B directory exists."""
    path = write(tmp_path, experiment({}, 'changes = ["perturb"]\n'
                                      'engine_args = { perturb = 0.5, n_ctx = 1024 }',
                                      engine="fake"))
    out = tmp_path / "AB"
    with fake_loads() as loads:
        r = cli("ab", str(path), "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert "undeclared key(s) before the load: engine_args.n_ctx (512 vs 1024)" in r.stderr
    assert "perturb" not in r.stderr.split("before the load:")[1].split(";")[0]
    assert not out.exists() and loads == []  # nothing written, nothing loaded


@pytest.mark.engine
def test_n_batch_clamped_after_the_load(tmp_path: Path) -> None:
    """A smaller context (declared) makes llama.cpp clamp n_batch to it: the A/B stops
    on the undeclared effective n_batch, and a contract on every arm exempts the
    declared n_ctx but not the n_batch it brings (two A/Bs, one test: one setting)."""
    _difference_seen_only_after_load_stops_the_ab(tmp_path / "undeclared")
    _contract_applies_to_every_arm_with_the_declared_switch_exempt(tmp_path / "contract")


def _difference_seen_only_after_load_stops_the_ab(tmp_path: Path) -> None:
    """The effective n_batch differs, undeclared, and the A/B stops before the
    candidate's first sample."""
    tmp_path.mkdir()
    path = write(tmp_path, experiment({}, 'changes = ["n_ctx"]\nengine_args = { n_ctx = 256 }'))
    out = tmp_path / "AB"
    r = abgate("ab", str(path), "-o", str(out))
    assert r.returncode == 1, r.stderr
    assert "undeclared key(s) after the load: effective.n_batch (512 vs 256)" in r.stderr
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "failed"
    entry = ab["differences"]["cand"]
    assert entry["request"]["declared"] == {"engine_args.n_ctx": ["512", "256"]}
    assert "effective.n_ctx" in entry["loaded"]["declared"]
    assert "effective.n_batch" in entry["loaded"]["undeclared"]
    assert read_lines(out / "arms" / "cand" / "samples.jsonl") == []


CONTRACT = """\
name = "ctx512"
[settings]
n_ctx = 512
n_batch = 512
"""


def _contract_applies_to_every_arm_with_the_declared_switch_exempt(tmp_path: Path) -> None:
    """The candidate's declared n_ctx is exempt from ``settings.n_ctx``; the n_batch it
    brings with it is not: the candidate fails the contract after its load."""
    tmp_path.mkdir()
    contract = write(tmp_path, CONTRACT, "contract.toml")
    path = write(tmp_path, experiment(
        {}, 'changes = ["n_ctx"]\nengine_args = { n_ctx = 256 }'))
    out = tmp_path / "AB"
    r = abgate("ab", str(path), "-o", str(out), "--contract", str(contract))
    assert r.returncode == 1, r.stderr
    assert "arm 'cand': contract" in r.stderr and "settings.n_batch" in r.stderr
    assert "settings.n_ctx" not in r.stderr
    base = json.loads((out / "arms" / "base" / "run.json").read_text())
    cand = json.loads((out / "arms" / "cand" / "run.json").read_text())
    assert base["provenance"]["contract"]["passed"] is True
    result = cand["provenance"]["contract"]
    assert result["passed"] is False
    assert [v["clause"] for v in result["violations"]] == ["settings.n_batch"]
    assert {v["clause"] for v in result["exempted"]} == {"settings.n_ctx"}


def test_opt_out_evidence_from_engine_logs(tmp_path: Path) -> None:
    from abgate.ab.optout import compile_patterns, opt_out_evidence
    from abgate.records.sections import ArmDifferences

    base, cand = tmp_path / "base", tmp_path / "cand"
    for d, value in ((base, 1), (cand, 0)):
        d.mkdir()
        (d / "server-llama.log").write_text(f"load\nllama_context: flash_attn = {value}\nok\n")
        (d / "run.log").write_text("flash_attn = 9\n")  # abgate's own log never counts
    entry = ArmDifferences.model_validate(
        {"request": {"declared": {"env.GGML_NO_FA": ["(not set)", '"1"']}},
         "loaded": {"declared": {}, "undeclared": {}}})
    found = opt_out_evidence(entry, (base, cand), [r"flash_attn = \d"])
    assert found is not None and found.observed and found.warning is None
    assert found.log_lines.to_dict() == {"baseline": ["llama_context: flash_attn = 1"],
                                         "candidate": ["llama_context: flash_attn = 0"]}
    silent = opt_out_evidence(entry, (base, cand), [r"no such line"])
    assert silent is not None and not silent.observed
    assert "only in env.GGML_NO_FA" in str(silent.warning)
    mixed = ArmDifferences.model_validate(
        {"request": {"declared": {"env.X": ["a", "b"], "engine_args.n_ctx": ["1", "2"]}}})
    assert opt_out_evidence(mixed, (base, cand), []) is None  # not an env-only difference
    with pytest.raises(UsageError, match=r"log_patterns '\(' is not a regular expression"):
        compile_patterns("x.toml [evidence]", ["("])


def test_env_only_difference_with_nothing_observable_warns(tmp_path: Path) -> None:
    """An opt-out variable the engine never reads: the A/B runs, and the records and the
    report say that nothing shows it took effect."""
    path = write(tmp_path, experiment({}, 'env = { ABGATE_TEST_OPT_OUT = "1" }',
                                      top='allow_differences = ["env.*"]', engine="fake"))
    out = tmp_path / "AB"
    r = cli("ab", str(path), "-o", str(out))
    assert r.returncode == 3, r.stderr  # 2 items: INCONCLUSIVE
    opt = json.loads((out / "ab.json").read_text())["differences"]["cand"]["opt_out"]
    assert opt["env"] == ["env.ABGATE_TEST_OPT_OUT"] and opt["observed"] is False
    assert "no recorded evidence shows the variable took effect" in opt["warning"]
    assert "nothing the engine reports differs" in r.stderr
    md = (out / "report.md").read_text()
    assert "**Opt-out evidence: none.** `cand` differs from `base` only in " \
           "`env.ABGATE_TEST_OPT_OUT`" in md
    assert "| `env.ABGATE_TEST_OPT_OUT` | before the load | (not set) | \"1\" | declared |" in md


def test_flags_declare_changes_and_allowed_classes(tmp_path: Path) -> None:
    """Without a file: --b-changes declares arm B's switch, --allow-diff a class."""
    out = tmp_path / "AB"
    base = ("ab", "--limit", "2", "-o", str(out), "--b-engine-arg", "flash_attn=true",
            "--b-env", "GGML_X=1", "--b-changes", "flash_attn")
    with engine_refused() as imported:  # the CLI in this process
        r = cli(*base)
        bad = cli(*base, "--allow-diff", "envs.*")
    assert r.returncode == 2 and "undeclared key(s) before the load: env.GGML_X" in r.stderr
    assert bad.returncode == 2 and "unknown key group 'envs'" in bad.stderr
    assert not out.exists() and not imported


def test_refusal_never_shows_a_secret(tmp_path: Path) -> None:
    env, marker = no_engine_env(tmp_path)  # through a subprocess: all it prints
    secret = "hf_" + "a1B2c3D4e5" * 3
    r = abgate("ab", "--limit", "2", "-o", str(tmp_path / "AB"), "--b-engine-arg",
               "flash_attn=true", "--b-env", f"HF_TOKEN={secret}", "--b-changes",
               "flash_attn", env=env)
    assert r.returncode == 2 and "env.HF_TOKEN" in r.stderr and not marker.exists()
    assert secret not in r.stderr + r.stdout and "<redacted>" in r.stderr


def test_experiment_contract_refuses_a_candidate_request_before_anything(tmp_path: Path
                                                                         ) -> None:
    """``contract = "FILE"`` in the experiment: the candidate's requested n_ctx breaks
    ``settings.n_ctx`` (not its declared switch): exit 2, nothing loaded or written."""
    write(tmp_path, CONTRACT, "contract.toml")
    path = write(tmp_path, experiment({}, 'changes = ["flash_attn"]\n'
                                      'engine_args = { flash_attn = true, n_ctx = 1024 }',
                                      top='contract = "contract.toml"'))
    out = tmp_path / "AB"
    with engine_refused() as imported:  # the CLI in this process
        r = cli("ab", str(path), "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert "arm 'cand': contract 'ctx512' violated (1 clause): [request] settings.n_ctx: " \
           "expected 512, got 1024" in r.stderr
    assert not out.exists() and not imported


OPT_OUT = """
name = "served-env-switch"
baseline = "default"
allow_differences = ["env.FLASH_ATTN"]
[shared]
engine = "openai"
suite = "synthetic"
difficulty = "trivial"
limit = 2
max_tokens = 8
engine_args = ENGINE_ARGS
[shared.engine_options]
launch = "LAUNCH"
ready_timeout = 120.0
[schedule]
warmup = 0
[evidence]
agreement = false
probes = false
log_patterns = ['flash_attn\\s*=\\s*\\S+']
[arms.default]
[arms.env-fa]
env = { FLASH_ATTN = "true" }
"""


@pytest.mark.server
@pytest.mark.engine
def test_env_switch_shown_by_the_launched_servers_log(tmp_path: Path) -> None:
    """llama_cpp.server reads its settings from the environment too: FLASH_ATTN=true in
    one arm's env turns flash attention on, and only the server's own log says so; the
    declared log pattern records both arms' lines, and nothing is warned."""
    pytest.importorskip("llama_cpp.server")
    launch = (f"{sys.executable} -m llama_cpp.server --model {{model}} --host {{host}} "
              "--port {port} --chat_format chat_template.default --logits_all false "
              "--use_mlock false --verbose true")
    text = OPT_OUT.replace("ENGINE_ARGS", toml_engine_args({"n_ctx": 1024}, 1)).replace(
        "LAUNCH", launch)
    path = write(tmp_path, text)
    out = tmp_path / "AB"
    r = abgate("ab", str(path), "-o", str(out))
    assert r.returncode == 3, r.stderr
    assert "Opt-out evidence: none" not in r.stderr
    opt = json.loads((out / "ab.json").read_text())["differences"]["env-fa"]["opt_out"]
    assert opt["observed"] is True and opt["warning"] is None and opt["reported"] == []
    (base_line,), (cand_line,) = opt["log_lines"]["baseline"], opt["log_lines"]["candidate"]
    assert base_line.split("=")[1].strip() == "disabled"
    assert cand_line.split("=")[1].strip() == "enabled"
    md = (out / "report.md").read_text()
    assert "**Opt-out evidence.** `env-fa` differs from `default` only in `env.FLASH_ATTN`" in md


def test_warnings_name_what_a_reader_must_not_miss() -> None:
    entry = {"request": {"undeclared": {"engine_args.n_ctx": ["512", "1024"]}},
             "loaded": {"undeclared": {}}, "unobserved": ["type_v"],
             "opt_out": {"warning": "nothing shows it"}}
    assert analyze.difference_warnings(entry) == [
        "Undeclared differences before the load (nothing declared, so none was refused): "
        "engine_args.n_ctx.",
        "Declared, but no recorded value differs: type_v (the switch may not be set in "
        "this arm, or not be reported).",
        "Opt-out evidence: none: nothing shows it."]
    assert analyze.difference_warnings({}) == []
