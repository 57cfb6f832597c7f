"""Damaged input files through the real CLI: one line on stderr naming the file, a
non-zero exit, no traceback, nothing written, and no engine loaded. (The loaders
themselves are fuzzed in test_fuzz_loaders.py; this checks the path from the CLI, run in
this process: ``tests.support.fake.cli``, as the console script runs it.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, engine_refused, error_lines
from tests.support.fake import cli

EXPERIMENT = (REPO / "examples" / "smollm2-kv-q8.toml").read_text()
GOOD_ROW = json.dumps({"question": "Tom has 2 apples. How many?", "answer": "2\n#### 2"})

# name -> (file name, content, CLI args with {f} for the file and {out} for the output)
CASES: dict[str, tuple[str, bytes, list[str]]] = {
    "manifest truncated": ("m.json", b'{"schema": "abgate.manifest", "params": {"include": ["a',
                           ["run", "--suite", "synthetic", "--limit", "1", "--manifest", "{f}"]),
    "contract wrong type": ("c.toml", b'name = "x"\n[settings]\nn_ctx = [1, {a = 2}]\n'
                            b'[env]\nrequired = { "A\\nB" = false }\n',
                            ["run", "--suite", "synthetic", "--limit", "1", "--contract", "{f}"]),
    "gsm8k bad utf-8": ("d.jsonl", GOOD_ROW.encode() + b"\n\xff\xfe\n",
                        ["run", "--suite", "gsm8k", "--data", "{f}"]),
    "gsm8k not an object": ("d.jsonl", GOOD_ROW.encode() + b"\n[1, 2]\n",
                            ["run", "--suite", "gsm8k", "--data", "{f}"]),
    "experiment bad utf-8": ("e.toml", EXPERIMENT.encode() + b"\n# \xc3\n", ["ab", "{f}"]),
    "experiment bad table": ("e.toml", EXPERIMENT.replace("[schedule]\n", "schedule = 3\n[x]\n")
                             .encode(), ["ab", "{f}"]),
    "experiment baseline list": ("e.toml", EXPERIMENT.replace('baseline = "f16"',
                                                               'baseline = ["f16"]').encode(),
                                 ["ab", "{f}"]),
    "engine arg huge int": ("unused", b"", ["run", "--suite", "synthetic", "--engine-arg",
                                            "n_ctx=" + "9" * 5000]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_file_is_one_line_and_writes_nothing(case: str, tmp_path: Path) -> None:
    name, content, args = CASES[case]
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "OUT"
    with engine_refused() as imported:
        r = cli(*[a.replace("{f}", str(path)) for a in args], "-o", str(out))
    assert r.returncode in (1, 2), r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("abgate: error:"), r.stderr
    assert "Traceback" not in r.stderr
    assert name in lines[0] or "engine-arg" in lines[0], lines[0]
    assert not out.exists()
    assert not imported


def test_resume_with_a_damaged_config_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "R"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({
        "schema_version": 1, "kind": "run", "status": "interrupted", "abgate_version": "0.1.0",
        "git": None, "host": {}, "started_at": 1.0, "spec": {}, "spec_digest": "d",
        "config": {"engine": "llamacpp", "seeds": "0,1", "limt": 3}}))
    before = (out / "run.json").read_bytes()
    with engine_refused() as imported:
        r = cli("run", "--resume", str(out))
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and "run.json: config" in r.stderr, r.stderr
    assert (out / "run.json").read_bytes() == before and not imported
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]
