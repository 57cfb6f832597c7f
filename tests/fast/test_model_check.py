"""A model checked at every load (issue 35, item 2): the file an engine opens must be
the bytes its spec names, before the load, right after it and when the work is done;
a file swapped between two loads of an A/B in blocks stops it, recorded as a failure
naming the file and both hashes. The fake engine takes any file as its "model"."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from abgate.ab import phases
from abgate.engines.fake import FakeEngine
from abgate.errors import AbgateError
from abgate.identity import HashCache
from abgate.runner.session import EngineSpec, loaded, prepare_engine
from tests.support.fake import RUN_FLAGS, cli

SIZE = 64 * 1024


def model_file(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * (SIZE // 256))
    time.sleep(0.05)  # past the clock's tick: a later write gets another ctime
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rewrite_in_place(path: Path, at: int = SIZE // 2) -> None:
    """One byte changed, the size kept and the mtime put back (``touch -d``)."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(at)
        old = fh.read(1)
        fh.seek(at)
        fh.write(bytes([old[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def rename_over(path: Path) -> None:
    """Another file of the same size and mtime renamed over the model (a new inode)."""
    st = path.stat()
    new = path.with_name(path.name + ".new")
    new.write_bytes(bytes(SIZE))
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, path)


def prepared(model: Path) -> Any:
    return prepare_engine(EngineSpec(engine="fake", model=str(model)))


# -- the hash cache ------------------------------------------------------------------------


def rewrite_at_first_request(monkeypatch: pytest.MonkeyPatch, model: Path) -> None:
    """The model file rewritten in place once, as the first request starts (a second
    flip would put the byte back)."""
    generate, swapped = FakeEngine.generate, []

    def swapping(self: FakeEngine, *args: Any, **kwargs: Any) -> Any:
        if not swapped:
            swapped.append(rewrite_in_place(model))
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(FakeEngine, "generate", swapping)


@pytest.mark.parametrize("swap", [rewrite_in_place, rename_over])

def test_hash_cache_never_hides_a_same_size_same_mtime_rewrite(
        tmp_path: Path, swap: Callable[[Path], None]) -> None:
    model = model_file(tmp_path / "m.gguf")
    cache = HashCache()
    first = cache.hash(model).sha256
    swap(model)
    assert cache.hash(model).sha256 == sha(model) != first
    assert cache.hash(model).sha256 == sha(model) and cache.misses == 2  # then cached


# -- every load ----------------------------------------------------------------------------


@pytest.mark.parametrize("swap", [rewrite_in_place, rename_over])
def test_a_model_swapped_before_the_load_is_refused(
        tmp_path: Path, swap: Callable[[Path], None]) -> None:
    model = model_file(tmp_path / "m.gguf")
    p, before = prepared(model), sha(model)
    swap(model)
    with pytest.raises(AbgateError) as err, loaded(p):
        pass
    msg = str(err.value)
    assert f"model {model} changed before the load" in msg, msg
    assert before in msg and sha(model) in msg and "\n" not in msg


def test_a_model_swapped_during_the_load_is_caught_right_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_file(tmp_path / "m.gguf")
    p = prepared(model)
    init = FakeEngine.__init__

    def swapping(self: FakeEngine, *args: Any) -> None:
        rewrite_in_place(model)
        init(self, *args)

    monkeypatch.setattr(FakeEngine, "__init__", swapping)
    with pytest.raises(AbgateError, match="changed during the load"), loaded(p):
        pytest.fail("the session must not start on a changed model")


def test_a_model_rewritten_while_loaded_is_caught_when_the_work_ends(tmp_path: Path) -> None:
    model = model_file(tmp_path / "m.gguf")
    p = prepared(model)
    with pytest.raises(AbgateError, match="changed while it was loaded"), loaded(p):
        rewrite_in_place(model)


def test_a_model_touched_but_unchanged_still_loads(tmp_path: Path) -> None:
    model = model_file(tmp_path / "m.gguf")
    p = prepared(model)
    os.utime(model, (1, 1))
    model.chmod(0o600)
    for _ in range(2):
        with loaded(p) as session:
            assert session.engine.describe().name == "fake"
    assert p.stamp.files[""].signature.mtime_ns == 1_000_000_000  # its new stat kept


def test_a_model_symlink_pointed_at_other_bytes_is_caught(tmp_path: Path) -> None:
    first = model_file(tmp_path / "first.gguf")
    other = tmp_path / "other.gguf"
    other.write_bytes(bytes(SIZE))
    link = tmp_path / "model.gguf"
    link.symlink_to(first)
    p = prepared(link)
    link.unlink()
    link.symlink_to(other)
    with pytest.raises(AbgateError) as err, loaded(p):
        pass
    msg = str(err.value)
    assert f"model {link} changed before the load" in msg and f"now the file {other}" in msg


def model_dir(tmp_path: Path) -> Path:
    root = tmp_path / "hf"
    (root / "sub").mkdir(parents=True)
    model_file(root / "model.safetensors")
    (root / "sub" / "config.json").write_text("{}")
    return root


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: rewrite_in_place(d / "model.safetensors"), "file model.safetensors changed"),
    (lambda d: (d / "sub" / "extra.bin").write_bytes(b"x"), "files added sub/extra.bin"),
    (lambda d: (d / "sub" / "config.json").unlink(), "files removed sub/config.json"),
])
def test_every_file_of_a_model_directory_is_checked(
        tmp_path: Path, change: Callable[[Path], object], said: str) -> None:
    root = model_dir(tmp_path)
    p = prepared(root)
    assert p.model_identity.kind == "directory"
    change(root)
    with pytest.raises(AbgateError) as err, loaded(p):
        pass
    msg = str(err.value)
    assert msg.startswith(f"model directory {root}") and said in msg, msg
    assert "before the load" in msg, msg


def test_a_model_gone_before_the_load_is_named(tmp_path: Path) -> None:
    model = model_file(tmp_path / "m.gguf")
    p = prepared(model)
    model.unlink()
    with pytest.raises(AbgateError, match=f"model {model} is gone before the load"), loaded(p):
        pass


# -- the commands ---------------------------------------------------------------------------


def blocks_ab(tmp_path: Path, model: Path) -> Path:
    exp = tmp_path / "ab.toml"
    exp.write_text(f"""name = "swap"
baseline = "a"
[shared]
engine = "fake"
model = "{model}"
suite = "synthetic"
difficulty = "easy"
limit = 4
seeds = [0]
max_tokens = 24
[schedule]
mode = "blocks"
block_size = 2
warmup = 1
[arms.a]
[arms.b]
engine_args = {{ tpot_ms = 4.0 }}
[evidence]
agreement = false
""")
    return exp


@pytest.mark.parametrize("swap", [rewrite_in_place, rename_over])
def test_an_ab_in_blocks_stops_when_the_model_is_swapped_between_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: Callable[[Path], None]) -> None:
    model = model_file(tmp_path / "m.gguf")
    before = sha(model)
    loads: list[str] = []
    load = phases.load_arm

    def swapping(state: Any, arm: str, *args: Any, **kwargs: Any) -> Any:
        loads.append(arm)
        if len(loads) == 2:  # after arm a's first block, before b's first load
            swap(model)
        return load(state, arm, *args, **kwargs)

    monkeypatch.setattr(phases, "load_arm", swapping)
    out = tmp_path / "AB"
    r = cli("ab", str(blocks_ab(tmp_path, model)), "-o", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert loads == ["a", "b"]  # stopped at b's first load
    ab = json.loads((out / "ab.json").read_text())
    assert ab["status"] == "failed", ab["status"]
    error = ab["error"]
    assert f"arm 'b': model {model} changed before the load" in error, error
    assert before in error and sha(model) in error and "undeclared" not in error
    assert error in r.stderr.replace("\n", " ") or f"model {model} changed" in r.stderr
    samples = (out / "arms" / "b" / "samples.jsonl")
    assert not samples.exists() or not samples.read_text().strip()  # b ran nothing
    assert not (out / "comparison.json").exists()
    for arm in ("a", "b"):
        assert json.loads((out / "arms" / arm / "run.json").read_text())["status"] == "failed"


def test_an_interleaved_ab_names_one_arm_when_the_model_changes_under_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_file(tmp_path / "m.gguf")
    rewrite_at_first_request(monkeypatch, model)
    exp = blocks_ab(tmp_path, model)
    exp.write_text(exp.read_text().replace('mode = "blocks"', 'mode = "interleave"')
                   .replace("warmup = 1", "warmup = 0"))  # both loaded before any request
    out = tmp_path / "AB"
    r = cli("ab", str(exp), "-o", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    error = json.loads((out / "ab.json").read_text())["error"]
    assert f"arm 'b': model {model} changed while it was loaded" in error, error
    assert error.count("arm '") == 1, error  # the arm whose close found it, once


def test_a_run_stops_when_its_model_is_rewritten_under_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_file(tmp_path / "m.gguf")
    rewrite_at_first_request(monkeypatch, model)
    out = tmp_path / "r"
    r = cli("run", *RUN_FLAGS, "--model", str(model), "--limit", "2", "-o", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed"
    assert f"model {model} changed while it was loaded" in run["error"], run["error"]


@pytest.mark.parametrize("command", [
    ("bench", "--input-len", "64", "--output-len", "8", "--repeats", "1", "--warmup", "0",
     "--peak-bw", "100"),
    ("baseline", "record", "--input-len", "64", "--output-len", "8", "--no-probes"),
])
def test_a_bench_or_baseline_stops_when_its_model_is_rewritten_under_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]) -> None:
    model = model_file(tmp_path / "m.gguf")
    rewrite_at_first_request(monkeypatch, model)
    out = tmp_path / "b"
    r = cli(*command, "--engine", "fake", "--model", str(model), "-o", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"model {model} changed while it was loaded" in r.stderr, r.stderr
    for name in ("run.json", "summary.json", "baseline.json"):
        if (out / name).exists():
            doc = json.loads((out / name).read_text())
            assert doc["status"] == "failed", (name, doc["status"])
