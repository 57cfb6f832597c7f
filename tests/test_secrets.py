"""Secrets never reach a record, a log or a report; harmless options always do (#17).

The redaction rules (``abgate.redact``) first, then the real CLI: distinct secrets are
planted in every place a user or the environment can put one (``--env`` pairs, engine
args, a ``--launch`` command, an endpoint URL, the API key, the process environment,
``--env-var``), every file the commands write is read back, and no secret may appear
in any of them while every harmless value (``--max-tokens 4`` among them) must.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from abgate.redact import (
    REDACTED,
    argv_secrets,
    env_secrets,
    is_secret_name,
    redact,
    redact_argv,
    redact_env,
    redact_text,
    redact_url,
    redacted_paths,
)
from tests.conftest import abgate, read_lines
from tests.support.fake import Result, cli
from tests.support.records import edit_record
from tests.test_openai_engine import FAKE_SERVER

# -- the rules ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "OPENAI_API_KEY", "api_key", "--api-key", "apiKey", "X-Api-Key", "APIKEY", "HF_TOKEN",
    "ACCESS_TOKEN", "--token", "--hf-token", "HFToken", "GITHUB_TOKEN", "DB_PASSWORD",
    "--password", "PASSWD", "SOME_PASSWORD", "client_secret", "AWS_SECRET_ACCESS_KEY",
    "Authorization", "Proxy-Authorization", "AUTH", "GOOGLE_APPLICATION_CREDENTIALS",
    "credential", "PRIVATE_KEY", "Cookie", "OPENAI_API_KEY_2", "db_pass",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "max_tokens", "--max-tokens", "MAX_TOKENS", "n_tokens", "num_tokens", "maxTokens",
    "max_num_batched_tokens", "tokenizer", "--tokenizer-mode", "TOKENIZERS_PARALLELISM",
    "eos_token", "bos_token", "reference_token", "token_ids", "output_tokens",
    "max_model_len", "--max-model-len", "key", "cache_key", "n_keys", "api_key_env",
    "--api-key-env", "HF_TOKEN_PATH", "PWD", "passed", "bypass", "keyboard", "monkey",
    "OMP_NUM_THREADS", "type_k", "",
])
def test_harmless_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(("text", "kept"), [
    ("key sk-" + "a1" * 12, "key "),
    ("hf_" + "Ab3" * 10, ""),
    ("token ghp_" + "x" * 36, "token "),
    ("github_pat_" + "1a" * 15, ""),
    ("AKIA" + "ABCDEFGHIJKLMNOP", ""),
    ("Authorization: Bearer abc.def-123", "Authorization: "),
    ("curl -H 'Bearer q1w2e3r4'", "curl -H 'Bearer "),
])
def test_value_shapes(text: str, kept: str) -> None:
    out = redact_text(text)
    assert REDACTED in out and out.startswith(kept)
    assert not any(s in out for s in ("a1a1", "Ab3Ab3", "xxxx", "1a1a", "ABCDEF", "q1w2",
                                      "abc.def"))


def test_shapes_need_a_boundary_and_a_length() -> None:
    for text in ("task-" + "c" * 30, "sk-learn", "hf_transfer", "Basic arithmetic works",
                 "mask-" + "d" * 30, "/models/sk-short/m.gguf"):
        assert redact_text(text) == text


def test_urls_keep_their_host() -> None:
    assert redact_url("http://alice:pw@127.0.0.1:8000/v1") == f"http://{REDACTED}@127.0.0.1:8000/v1"
    assert redact_url("https://tok@host") == f"https://{REDACTED}@host"
    assert redact_url("http://h:8000/v1?api_key=s3cr3t&n=2") == f"http://h:8000/v1?api_key={REDACTED}&n=2"
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_argv_both_flag_forms_pairs_and_embedded_commands() -> None:
    argv = ["abgate", "run", "--max-tokens", "8", "--api-key", "k1", "--token=k2",
            "--env", "OPENAI_API_KEY=k3", "--env=HF_TOKEN=k4", "--env", "OMP_NUM_THREADS=2",
            "--engine-arg", "n_ctx=2048", "--launch", "vllm serve m --api-key k5 --port {port}",
            "--endpoint", "http://u:k6@h:1", "--api-key-env", "MY_KEY", "--hf-token", "--port"]
    shown = redact_argv(argv)
    assert shown == ["abgate", "run", "--max-tokens", "8", "--api-key", REDACTED,
                     f"--token={REDACTED}", "--env", f"OPENAI_API_KEY={REDACTED}",
                     f"--env=HF_TOKEN={REDACTED}", "--env", "OMP_NUM_THREADS=2",
                     "--engine-arg", "n_ctx=2048", "--launch",
                     f"vllm serve m --api-key {REDACTED} --port {{port}}", "--endpoint",
                     f"http://{REDACTED}@h:1", "--api-key-env", "MY_KEY", "--hf-token", "--port"]
    assert argv_secrets(argv) == ["k1", "k2"]
    assert redact_argv(["serve", "--note", "abc-secret-1"], ["abc-secret-1"]) == \
        ["serve", "--note", REDACTED]


def test_free_text_logs() -> None:
    log = ("fake server starting; extra flags: ['--api-key', 'k-1', '--n', '3'] "
           '{"password": "p-2", "max_tokens": 8} api_key=k-3, HF_TOKEN: k-4 '
           "non-default args: {'api_key': 'k-5', 'max_model_len': 2048}")
    out = redact_text(log)
    assert not any(f"k-{i}" in out or f"p-{i}" in out for i in range(1, 6))
    assert "'--n', '3'" in out and '"max_tokens": 8' in out and "'max_model_len': 2048" in out
    assert redact_text("literal s3cr3t-value in a line", ["s3cr3t-value", "ab"]) == \
        f"literal {REDACTED} in a line"


def test_recursion_over_documents() -> None:
    doc: dict[str, Any] = {
        "headers": {"Authorization": "Bearer t0k", "Accept": "application/json",
                    "X-Api-Key": "k"},
        "max_tokens": 8, "token": 5, "tokens": [1, 2], "api_key_env": "OPENAI_API_KEY",
        "credentials": {"user": "u", "nested": ["a", "b"]},
        "cmdline": ["python", "-m", "x", "--token", "t1", "--n", "1"],
        "env": {"HF_TOKEN": None, "OMP_NUM_THREADS": "2"},
        "rows": [{"password": "p"}, {"url": "http://u:p@h"}, 3, None, True],
    }
    assert redact(doc) == {
        "headers": {"Authorization": REDACTED, "Accept": "application/json",
                    "X-Api-Key": REDACTED},
        "max_tokens": 8, "token": 5, "tokens": [1, 2], "api_key_env": "OPENAI_API_KEY",
        "credentials": {"user": REDACTED, "nested": [REDACTED, REDACTED]},
        "cmdline": ["python", "-m", "x", "--token", REDACTED, "--n", "1"],
        "env": {"HF_TOKEN": None, "OMP_NUM_THREADS": "2"},
        "rows": [{"password": REDACTED}, {"url": f"http://{REDACTED}@h"}, 3, None, True],
    }
    assert redact(redact(doc)) == redact(doc)  # idempotent
    assert redacted_paths(redact(doc))[:2] == ["headers.Authorization", "headers.X-Api-Key"]


def test_env_helpers() -> None:
    env = {"HF_TOKEN": "abc", "OMP_NUM_THREADS": "2", "HF_HUB_X": "hf_" + "z" * 30}
    assert redact_env(env) == {"HF_TOKEN": REDACTED, "OMP_NUM_THREADS": "2",
                               "HF_HUB_X": REDACTED}
    assert env_secrets({**env, "DB_PASSWORD": "", "X_TOKEN": None}) == ["abc"]


# -- every command, every file ------------------------------------------------------------

SECRETS = {
    "run --env (api key)": "sk-envsecret-77",
    "run --env (password)": "pw-secret-55",
    "run --env (shape only)": "hf_RunEnvShape0123456789abcdef",
    "process env HF_TOKEN": "hf_ProcEnvToken0123456789abcdef",
    "process env URL credentials": "pw-hfendpoint-42",
    "process env shape": "sk-procenvshape0123456789abcdef",
    "api key env value": "key-from-env-9f8e7d6c",
    "launch --secret-token": "sk-launchliteral0123456789abcd",
    "launch --admin-password=": "pw-launch-eq-1234",
    "engine arg hf-token": "hf_EngineArg0123456789abcdefgh",
    "openai --env": "pw-openai-env-31",
    "endpoint URL password": "pw-url-secret-31",
    "endpoint URL user": "alice-user-xyz",
    "ab --a-env": "sk-abarm-a-0123456789abcdefgh",
    "ab --b-env": "tok-barm-secret-66",
    "bench --env": "pw-bench-secret-12",
    "baseline --env": "tok-baseline-secret-21",
    "manifest --env-var": "pw-manifest-secret-88",
}
PROCESS_ENV = {
    "HF_TOKEN": SECRETS["process env HF_TOKEN"],
    "HF_ENDPOINT": f"https://carol:{SECRETS['process env URL credentials']}@hub.example",
    "VLLM_ABGATE_NOTE": SECRETS["process env shape"],
    "ABGATE_TEST_API_KEY": SECRETS["api key env value"],
    "MY_SERVICE_PASSWORD": SECRETS["manifest --env-var"],
    "ABGATE_PLAIN": "visible-plain-value",
}
TINY = ["--suite", "synthetic", "--difficulty", "trivial", "--limit", "1", "--max-tokens", "4"]
# the in-process commands run on the fake engine (what is recorded is workflow logic;
# the openai ones reach a fake OpenAI server), with one harmless engine arg
LLAMA = ["--engine", "fake", "--engine-arg", "seed=1"]


def _cli(*args: str | Path, timeout: float = 300, in_process: bool = False
         ) -> Result | subprocess.CompletedProcess[str]:
    """A command under PROCESS_ENV: in a subprocess (its recorded command line is
    abgate's own), or in this process (``tests.support.fake.cli``)."""
    r: Result | subprocess.CompletedProcess[str]
    if in_process:
        r = cli(*map(str, args), env=PROCESS_ENV)
    else:
        r = abgate(*map(str, args), timeout=timeout, env=PROCESS_ENV)
    ok = (0, 1, 3) if args[0] == "ab" else (0,)  # an A/B of one item may decide anything
    assert r.returncode in ok, f"abgate {' '.join(map(str, args))}\n{r.stderr}"
    return r


def _free_port() -> int:
    from abgate.engines.shared.server_cleanup import free_port

    return free_port()


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A fake OpenAI server to reach through a URL with credentials."""
    script = tmp_path_factory.mktemp("fake") / "fake_server.py"
    script.write_text(FAKE_SERVER)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory, endpoint: int) -> Path:
    """Every command, two at a time."""
    base = tmp_path_factory.mktemp("secrets")
    work = tmp_path_factory.mktemp("inputs")
    fake = work / "fake_server.py"
    fake.write_text(FAKE_SERVER)
    (work / "root").mkdir()
    (work / "root" / "a.py").write_text("X = 1\n")
    launch = (f"{sys.executable} {fake} --port {{port}} --api-key {{api_key}} --secret-token "
              f"{SECRETS['launch --secret-token']} "
              f"--admin-password={SECRETS['launch --admin-password=']} --max-model-len 2048")
    url = (f"http://{SECRETS['endpoint URL user']}:{SECRETS['endpoint URL password']}"
           f"@127.0.0.1:{endpoint}")
    jobs: list[tuple[str | Path, ...]] = [
        ("ab", *TINY[:2], *TINY[4:], *LLAMA, "--b-engine-arg", "tpot_ms=4.0",
         "--no-agreement", "--no-probes",
         "--a-env", f"A_API_KEY={SECRETS['ab --a-env']}",
         "--b-env", f"B_ACCESS_TOKEN={SECRETS['ab --b-env']}", "-o", base / "ab"),
        ("run", *TINY, *LLAMA, "--env", f"OPENAI_API_KEY={SECRETS['run --env (api key)']}",
         "--env", f"SOME_PASSWORD={SECRETS['run --env (password)']}",
         "--env", f"HF_HUB_NOTE={SECRETS['run --env (shape only)']}",
         "--env", "ABGATE_MAX_TOKENS=4321", "-o", base / "run"),
        ("run", *TINY, "--engine", "openai", "--launch", launch,
         "--api-key-env", "ABGATE_TEST_API_KEY", "--ready-timeout", "60",
         "--engine-arg", f"hf-token={SECRETS['engine arg hf-token']}",
         "--engine-arg", "n-tokens=77", "--env", f"OPENAI_PASSWORD={SECRETS['openai --env']}",
         "-o", base / "launched"),
        ("run", *TINY, "--engine", "openai", "--endpoint", url, "-o", base / "endpoint"),
        ("bench", "--input-len", "16", "--output-len", "4", "--repeats", "1", "--warmup", "0",
         "--peak-bw", "10", *LLAMA, "--env", f"BENCH_DB_PASSWORD={SECRETS['bench --env']}",
         "-o", base / "bench"),
        ("baseline", "record", "--input-len", "16", "--output-len", "4", "--repeats", "1",
         "--warmup", "0", "--no-probes", *LLAMA,
         "--env", f"BASELINE_ACCESS_TOKEN={SECRETS['baseline --env']}", "-o", base / "baseline"),
        ("manifest", "build", "--root", work / "root", "--env-var", "MY_SERVICE_PASSWORD",
         "--env-var", "ABGATE_PLAIN", "-o", base / "manifest.json"),
    ]
    # the commands whose recorded command line a test reads run as subprocesses, two at
    # a time, while the others run in this process
    argv_read = [job for job in jobs if job[-1] in (base / "ab", base / "run",
                                                    base / "baseline")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        running = [pool.submit(_cli, *job) for job in argv_read]
        for job in jobs:
            if job not in argv_read:
                _cli(*job, in_process=True)
        for done in running:
            assert done.result() is not None
    for fmt in ("md", "html"):
        _cli("report", base / "ab", "--format", fmt, "-o", base / f"report.{fmt}",
             in_process=True)
    return base


def _texts(root: Path) -> dict[str, str]:
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): p.read_text(encoding="utf-8", errors="replace") for p in files}


def test_no_secret_in_any_file_written(out: Path) -> None:
    texts = _texts(out)
    names = {Path(p).relative_to(out).as_posix() for p in texts}
    # what each command writes, so that the grep below covers every kind of file
    for expected in ("run/run.json", "run/run.log", "run/samples.jsonl", "run/summary.json",
                     "launched/server-fake_server.log", "endpoint/run.json",
                     "ab/ab.json", "ab/comparison.json", "ab/run.log", "ab/arms/A/run.json",
                     "ab/arms/B/samples.jsonl", "ab/report.md", "ab/report.json",
                     "ab/report.html", "bench/run.json", "bench/summary.json",
                     "baseline/baseline.json", "manifest.json", "report.md", "report.html"):
        assert expected in names, expected
    leaks = [f"{label} in {Path(path).relative_to(out)}"
             for path, text in texts.items() for label, secret in SECRETS.items()
             if secret in text]
    assert leaks == []


def _cmdline(run_json: Path) -> list[str]:
    """The recorded command line of abgate itself (the in-process engine's process)."""
    doc = json.loads(run_json.read_text())
    (lib,) = [x for x in doc["provenance"]["libraries"] if "abgate" in x["cmdline"]]
    cmd: list[str] = lib["cmdline"]
    return cmd


def _has(seq: list[str], *words: str) -> bool:
    return any(seq[i:i + len(words)] == list(words) for i in range(len(seq)))


def test_harmless_values_are_kept(out: Path) -> None:
    cmd = _cmdline(out / "run" / "run.json")
    assert _has(cmd, "--max-tokens", "4") and _has(cmd, "--engine-arg", "seed=1")
    assert _has(cmd, "--env", f"OPENAI_API_KEY={REDACTED}")
    assert _has(cmd, "--env", "ABGATE_MAX_TOKENS=4321")
    run = json.loads((out / "run" / "run.json").read_text())
    assert run["config"]["max_tokens"] == 4 and run["spec"]["sampling"]["max_tokens"] == 4
    assert run["spec"]["env"] == {"OPENAI_API_KEY": REDACTED, "SOME_PASSWORD": REDACTED,
                                  "HF_HUB_NOTE": REDACTED, "ABGATE_MAX_TOKENS": "4321"}
    env = run["provenance"]["environment"]["env"]
    assert env["HF_TOKEN"] == REDACTED and env["HF_ENDPOINT"] == f"https://{REDACTED}@hub.example"
    assert env["VLLM_ABGATE_NOTE"] == REDACTED

    ab_cmd = _cmdline(out / "ab" / "arms" / "A" / "run.json")
    assert _has(ab_cmd, "--max-tokens", "4") and _has(ab_cmd, "--b-engine-arg", "tpot_ms=4.0")
    assert _has(ab_cmd, "--a-env", f"A_API_KEY={REDACTED}")
    bench = json.loads((out / "bench" / "run.json").read_text())  # a bench records no argv
    assert bench["config"]["output_len"] == 4 and bench["config"]["peak_bw_gbps"] == 10
    assert bench["config"]["env"] == {"BENCH_DB_PASSWORD": REDACTED}
    assert _has(_cmdline(out / "baseline" / "baseline.json"), "--input-len", "16")


def test_launched_server_records(out: Path) -> None:
    run = json.loads((out / "launched" / "run.json").read_text())
    launch = run["spec"]["engine_options"]["launch"]
    assert "--api-key {api_key}" in launch and "--max-model-len 2048" in launch
    assert f"--secret-token {REDACTED}" in launch and f"--admin-password={REDACTED}" in launch
    assert run["engine"]["given"] == {"hf-token": REDACTED, "n-tokens": 77}
    assert run["spec"]["engine_options"]["api_key_env"] == "ABGATE_TEST_API_KEY"
    shown = run["engine"]["effective"]["launch"]
    assert _has(shown, "--api-key", REDACTED) and _has(shown, "--max-model-len", "2048")
    assert _has(shown, "--n-tokens", "77") and _has(shown, "--hf-token", REDACTED)
    log = (out / "launched" / "server-fake_server.log").read_text()
    assert "extra flags:" in log and "'--max-model-len', '2048'" in log and REDACTED in log
    samples = read_lines(out / "launched" / "samples.jsonl")
    assert samples and samples[0]["error"] is None


def test_endpoint_url_keeps_its_host(out: Path, endpoint: int) -> None:
    run = json.loads((out / "endpoint" / "run.json").read_text())
    shown = f"http://{REDACTED}@127.0.0.1:{endpoint}"
    assert run["spec"]["engine_options"]["endpoints"] == [shown]
    assert run["engine"]["effective"]["endpoints"] == [shown]
    assert run["cleanup"]["endpoint_stats"][0]["url"] == shown
    assert read_lines(out / "endpoint" / "samples.jsonl")[0]["error"] is None


def test_manifest_and_reports(out: Path) -> None:
    env = json.loads((out / "manifest.json").read_text())["environment"]["env"]
    assert env["MY_SERVICE_PASSWORD"] == REDACTED and env["ABGATE_PLAIN"] == "visible-plain-value"
    assert env["HF_ENDPOINT"] == f"https://{REDACTED}@hub.example"
    report = (out / "report.md").read_text()
    assert "tpot_ms" in report and REDACTED in report and "A_API_KEY" in report


def _interrupted(record: Path) -> None:
    """Mark a copied record interrupted: a complete one is "already complete" on resume
    (nothing would run, so its redacted values would not matter)."""
    edit_record(record, status="interrupted")


def test_resume_refuses_to_run_with_redacted_values(out: Path, tmp_path: Path) -> None:
    shutil.copytree(out / "endpoint", tmp_path / "r")
    _interrupted(tmp_path / "r" / "run.json")
    r = abgate("run", "--resume", str(tmp_path / "r"), env=PROCESS_ENV, timeout=120)
    assert r.returncode == 2 and "engine_options.endpoints" in r.stderr
    shutil.copytree(out / "ab", tmp_path / "ab")
    _interrupted(tmp_path / "ab" / "ab.json")
    r2 = abgate("ab", "--resume", str(tmp_path / "ab"), env=PROCESS_ENV, timeout=120)
    assert r2.returncode == 2 and "A.env.A_API_KEY" in r2.stderr
    text = r.stdout + r.stderr + r2.stdout + r2.stderr
    assert not any(secret in text for secret in SECRETS.values())


def test_error_messages_are_redacted() -> None:
    r = cli("run", "--engine", "openai", "--endpoint", "ftp://bob:pw-in-error-7@h:1",
            "-o", "unused")
    assert r.returncode == 2 and "ftp://<redacted>@h:1" in r.stderr
    assert "pw-in-error-7" not in r.stderr + r.stdout


def test_run_log_lines_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from abgate.runner.execute import RedactingFormatter

    monkeypatch.setenv("ABGATE_X_PASSWORD", "literal-pw-123")
    record = logging.LogRecord("abgate.run", logging.INFO, __file__, 1,
                               "endpoint %s failed; max_tokens=8 literal-pw-123",
                               ("http://u:p@h:1",), None)
    assert RedactingFormatter("%(message)s").format(record) == \
        f"endpoint http://{REDACTED}@h:1 failed; max_tokens=8 {REDACTED}"


def test_pass_in_prose_is_not_a_password() -> None:
    from abgate.redact import redact_text

    assert redact_text("All gates pass: accuracy, speed") == "All gates pass: accuracy, speed"
    assert redact_text("PASS=hunter2x") == "PASS=<redacted>"
    assert redact_text("--pass hunter2x") == "--pass <redacted>"
    assert "hunter2x" not in redact_text("password: hunter2x")
