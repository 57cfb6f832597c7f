"""Fuzz every loader of user input (hypothesis): experiment, policy and contract TOML;
manifest JSON; run.json, samples.jsonl, ab.json; engine-arg strings; GSM8K JSONL and
parquet. Each input is a valid file broken at the byte level (truncated, cut, bad UTF-8,
stray syntax) or at the structure level (a value of another type, a key deleted or
added). The property: the loader returns or raises an AbgateError whose one-line
message names the file, never a traceback; and nothing is written where it fails."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from abgate.ab.experiment import load_experiment
from abgate.baseline.core import read_baseline
from abgate.bench import BenchConfig
from abgate.compare.policy import load_policy
from abgate.engines.args import parse_pairs, validate_args
from abgate.engines.llamacpp.engine import ARG_SPECS
from abgate.integrity import record_text, seal
from abgate.provenance.contract_toml import load_contract
from abgate.provenance.loading import read_manifest
from abgate.provenance.manifest import build_manifest, write_manifest
from abgate.records.documents import RunRecord
from abgate.report.load import load_ab
from abgate.runner.documents import read_record
from abgate.runner.records import read_samples
from abgate.runner.spec import RunConfig
from abgate.suites import gsm8k
from tests.conftest import REPO
from tests.support.fuzz import (
    FUZZ,
    JSON_VALUES,
    SPECIALS,
    broken_doc,
    broken_text,
    check_clean,
    toml_dumps,
)
from tests.support.report import build_ab_dir
from tests.test_contract import EXAMPLE as CONTRACT

EXPERIMENT = (REPO / "examples" / "smollm2-kv-q8.toml").read_bytes()
POLICY = (REPO / "src" / "abgate" / "policies" / "default.toml").read_bytes()
GSM8K_LINES = [{"question": f"Tom has {i} apples and buys 2 more. How many?",
                "answer": f"{i} + 2 = {i + 2}\n#### {i + 2}"} for i in range(3)]


def fresh(tmp: Path, name: str, data: bytes) -> Path:
    """A new directory per example (hypothesis reuses the function-scoped tmp_path)."""
    d = tmp / f"ex{len(list(tmp.iterdir()))}"
    d.mkdir()
    (d / name).write_bytes(data)
    return d / name


# -- TOML: experiment, policy, contract ----------------------------------------------

TOML_LOADERS = {"experiment.toml": (EXPERIMENT, load_experiment),
                "policy.toml": (POLICY, load_policy),
                "contract.toml": (CONTRACT.encode(), load_contract)}


@pytest.mark.parametrize("name", sorted(TOML_LOADERS))
@FUZZ
@given(data=st.data())
def test_toml_bytes(name: str, data: st.DataObject, tmp_path: Path) -> None:
    base, load = TOML_LOADERS[name]
    path = fresh(tmp_path, name, data.draw(broken_text(base)))
    check_clean(lambda: load(path), path)


@pytest.mark.parametrize("name", sorted(TOML_LOADERS))
@FUZZ
@given(data=st.data())
def test_toml_structure(name: str, data: st.DataObject, tmp_path: Path) -> None:
    base, load = TOML_LOADERS[name]
    doc = data.draw(broken_doc(tomllib.loads(base.decode())))
    path = fresh(tmp_path, name, toml_dumps(doc).encode())
    check_clean(lambda: load(path), path)


# -- manifest JSON -------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifest_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("tree")
    (root / "a.py").write_text("print(1)\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("b\n")
    write_manifest(build_manifest(root, listing="walk"), root / "m.json")
    return (root / "m.json").read_bytes()


@FUZZ
@given(data=st.data())
def test_manifest(manifest_bytes: bytes, data: st.DataObject, tmp_path: Path) -> None:
    if data.draw(st.booleans()):
        raw = data.draw(broken_text(manifest_bytes))
    else:
        raw = json.dumps(data.draw(broken_doc(json.loads(manifest_bytes), JSON_VALUES))).encode()
    path = fresh(tmp_path, "manifest.json", raw)
    check_clean(lambda: read_manifest(path), path)


# -- records: run.json, samples.jsonl, ab.json ----------------------------------------


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ab_dir(tmp_path_factory.mktemp("ab") / "AB")


RECORD_FILES = ["ab.json", "comparison.json", "arms/base/run.json", "arms/base/summary.json",
                "arms/base/samples.jsonl"]


@FUZZ
@given(data=st.data())
def test_ab_directory(ab_dir: Path, data: st.DataObject, tmp_path: Path) -> None:
    out = tmp_path / f"ab{len(list(tmp_path.iterdir()))}"
    shutil.copytree(ab_dir, out)
    names = [n for n in RECORD_FILES if (out / n).exists()]
    target = out / data.draw(st.sampled_from(names))
    base = target.read_bytes()
    if target.suffix == ".jsonl" or data.draw(st.booleans()):
        raw = data.draw(broken_text(base))
    else:
        raw = json.dumps(data.draw(broken_doc(json.loads(base), JSON_VALUES))).encode()
    target.write_bytes(raw)
    before = sorted(p.name for p in out.rglob("*"))
    err = check_clean(lambda: load_ab(out), out)
    if err is None and target.suffix == ".json":  # the record itself, on its own
        check_clean(lambda: read_record(target), target)
    assert sorted(p.name for p in out.rglob("*")) == before  # loading writes nothing


def test_ab_names_exist(ab_dir: Path) -> None:
    assert all((ab_dir / n).exists() for n in RECORD_FILES), list(ab_dir.rglob("*"))


@FUZZ
@given(data=st.data())
def test_samples_jsonl(ab_dir: Path, data: st.DataObject, tmp_path: Path) -> None:
    base = (ab_dir / "arms" / "base" / "samples.jsonl").read_bytes()
    path = fresh(tmp_path, "samples.jsonl", data.draw(broken_text(base)))
    check_clean(lambda: read_samples(path), path)


@FUZZ
@given(data=st.data())
def test_run_json_config_for_resume(ab_dir: Path, data: st.DataObject, tmp_path: Path) -> None:
    """``--resume`` rebuilds the run's config from its run.json."""
    run = json.loads((ab_dir / "arms" / "base" / "run.json").read_bytes())
    run["config"] = data.draw(broken_doc(run["config"], JSON_VALUES))
    path = fresh(tmp_path, "run.json", json.dumps(run).encode())
    check_clean(lambda: RunConfig.from_dict(read_record(path, model=RunRecord).config,
                                            where=str(path)), path)


# -- baseline.json (abgate baseline check) -------------------------------------------

BASELINE: dict[str, Any] = seal({
    "schema_version": 1, "kind": "baseline", "status": "complete", "abgate_version": "0.1.0",
    "git": None, "host": {"hostname": "h"}, "started_at": 1.0, "recorded_at": 1.0,
    "spec": {"engine": "llamacpp"}, "spec_digest": "d" * 64,
    "config": BenchConfig(input_lens=(32,), output_len=8, probes=True).to_dict(),
    "cases": [{"input_len": 32, "output_len": 8, "prompt_sha256": "a" * 64,
               "prompt_ids": list(range(32)), "output_token_ids": list(range(8)),
               "speed": {"steady_decode_tps": {"median": 100.0}},
               "decode_tps_values": [100.0, 101.0, 99.0]}],
    "probes": [{"name": name, "passed": True, "reason": "ok"}
               for name in ("arithmetic", "copy", "needle")]})


@FUZZ
@given(data=st.data())
def test_baseline_json(data: st.DataObject, tmp_path: Path) -> None:
    raw = json.dumps(BASELINE, indent=1).encode()
    if data.draw(st.booleans()):
        raw = data.draw(broken_text(raw))
    else:  # resealed half the time, so that the checks behind the seal are fuzzed too
        broken = data.draw(broken_doc(BASELINE, JSON_VALUES))
        if isinstance(broken, dict) and data.draw(st.booleans()):
            with contextlib.suppress(ValueError):  # (NaN cannot be sealed)
                broken = seal(broken)
        raw = record_text(broken).encode()
    path = fresh(tmp_path, "baseline.json", raw)
    check_clean(lambda: read_baseline(path), path)


def test_baseline_json_as_recorded_reads(tmp_path: Path) -> None:
    path = fresh(tmp_path, "baseline.json", record_text(BASELINE).encode())
    doc, config = read_baseline(path)
    assert config.input_lens == (32,) and doc.cases[0].input_len == 32


# -- engine-arg strings --------------------------------------------------------------

ARG_TEXT = st.text(alphabet=st.sampled_from(SPECIALS + "n_ctxflash_attntype_k=q8"),
                   max_size=30) | st.sampled_from(
    ["n_ctx=" + "9" * 5000, "n_ctx=" + "[" * 5000, "seed=1e999", "n_ctx=\u0661\u0662",
     "type_k=Q8_0", "flash_attn=yes", "=1", "n_ctx", "n_ctx=1.5"])


@FUZZ
@given(items=st.lists(ARG_TEXT, max_size=4))
def test_engine_arg_strings(items: list[str]) -> None:
    def load() -> None:
        validate_args("llamacpp", parse_pairs(items, "--engine-arg"), ARG_SPECS)

    check_clean(load, "--engine-arg", names="engine.arg")


# -- GSM8K JSONL and parquet ---------------------------------------------------------

GSM8K_JSONL = "".join(json.dumps(r) + "\n" for r in GSM8K_LINES).encode()


@FUZZ
@given(data=st.data())
def test_gsm8k_jsonl(data: st.DataObject, tmp_path: Path) -> None:
    if data.draw(st.booleans()):
        raw = data.draw(broken_text(GSM8K_JSONL))
    else:
        rows = data.draw(broken_doc(GSM8K_LINES, JSON_VALUES))
        raw = "".join(json.dumps(r) + "\n" for r in rows).encode() if isinstance(rows, list) \
            else json.dumps(rows).encode()
    path = fresh(tmp_path, "test.jsonl", raw)
    check_clean(lambda: gsm8k.load(str(path)), path)


def _parquet(rows: list[Any]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


PARQUET_VALUES = st.none() | st.integers(-5, 5) | st.text(max_size=8) | st.booleans() \
    | st.lists(st.integers(0, 3), max_size=2)


@FUZZ
@given(data=st.data())
def test_gsm8k_parquet(data: st.DataObject, tmp_path: Path) -> None:
    if data.draw(st.booleans()):
        raw = data.draw(broken_text(_parquet(GSM8K_LINES)))
    else:
        rows = [dict(r) for r in GSM8K_LINES]
        for row in rows:  # a column of another type, or missing, or an extra one
            key = data.draw(st.sampled_from(["question", "answer", "extra"]))
            value = data.draw(PARQUET_VALUES)
            row[key] = value
        try:
            raw = _parquet(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return  # mixed types pyarrow itself will not write
    path = fresh(tmp_path, "test.parquet", raw)
    check_clean(lambda: gsm8k.load(str(path)), path)


# -- what the fuzzing found, kept as plain regression cases ------------------------------

FOUND: dict[str, tuple[str, bytes, Any]] = {
    "experiment bad utf-8": ("e.toml", b"\xff" + EXPERIMENT, load_experiment),
    "experiment schedule not a table": ("e.toml", b"schedule = 3\n[arms.a]\n[arms.b]\n",
                                        load_experiment),
    "experiment baseline a list": ("e.toml", EXPERIMENT.replace(b'baseline = "f16"',
                                                                b'baseline = ["f16"]'),
                                   load_experiment),
    "contract key with a newline": ("c.toml", b'[env]\nrequired = { "A\\nB" = false }\n',
                                    load_contract),
    "manifest NaN": ("m.json", b'{"schema": NaN}', read_manifest),
    "manifest libraries null": ("m.json", b'{"schema": "abgate.manifest"}', read_manifest),
    "gsm8k bad utf-8": ("d.jsonl", b"\xc3\n", gsm8k.load),
    "gsm8k deep JSON": ("d.jsonl", b"[" * 100000 + b"\n", gsm8k.load),
    "record bad utf-8": ("run.json", b'{"a": "\xed\xa0\x80"}', read_record),
    "record deep JSON": ("run.json", b"[" * 100000, read_record),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_found_cases(case: str, tmp_path: Path) -> None:
    name, raw, load = FOUND[case]
    path = tmp_path / name
    path.write_bytes(raw)
    arg: Any = str(path) if load is gsm8k.load else path
    assert check_clean(lambda: load(arg), path) is not None


def test_found_samples_line_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"key": "a"}\n42\n{"key": "b"}\n')
    assert check_clean(lambda: read_samples(path), path) is not None


@pytest.mark.parametrize("value", ["9" * 5000, "[" * 100000])
def test_found_engine_args(value: str) -> None:
    err = check_clean(lambda: parse_pairs([f"n_ctx={value}"], "--engine-arg"), "",
                      names="--engine-arg 'n_ctx'")
    assert err is not None and len(str(err)) < 300


def test_found_parquet_string_column_not_utf8(tmp_path: Path) -> None:
    """A file that decodes as parquet but holds a string column that is not UTF-8 (found
    by a 2000-example run: the error came from converting rows, outside the guard)."""
    data = b"\xff\xfe bad"
    offsets = pa.py_buffer(b"\x00\x00\x00\x00" + len(data).to_bytes(4, "little"))
    question = pa.StringArray.from_buffers(1, offsets, pa.py_buffer(data))
    path = tmp_path / "test.parquet"
    pq.write_table(pa.table({"question": question, "answer": ["x\n#### 1"]}), path)
    assert check_clean(lambda: gsm8k.load(str(path)), path) is not None
