"""The transformers engine before anything loads (no torch needed, nothing imported by
registering it): registration, model resolution and the engine args refused by
``prepare_engine``. Were engine-tier tests in tests/test_engine_transformers.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from abgate.engines import engine_class
from abgate.engines.transformers import engine as hf
from abgate.errors import UsageError
from abgate.runner.session import EngineSpec, prepare_engine


def test_registered_lazily_and_torch_is_imported_only_on_load() -> None:
    assert engine_class("transformers") is hf.TransformersEngine
    code = ("import sys, abgate.engines.transformers.engine as t, abgate.runner.session; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def test_bad_engine_args_are_refused_before_load(tmp_path: Path) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))

    def prep(**args: Any) -> None:
        prepare_engine(EngineSpec("transformers", str(model), args))

    with pytest.raises(UsageError, match="cache_implementation"):
        prep(cache_implementaton="static")  # typo: the close match is named
    with pytest.raises(UsageError, match="did you mean.*static"):
        prep(cache_implementation="statc")
    with pytest.raises(UsageError, match="expects int"):
        prep(max_cache_len="big")
    with pytest.raises(UsageError, match="needs cache_implementation"):
        prep(max_cache_len=64)
    with pytest.raises(UsageError, match="exclude each other"):
        prep(device="cpu", device_map="auto")
    with pytest.raises(UsageError, match="two kinds of speculative"):
        prep(assistant_model=str(model), prompt_lookup_num_tokens=3)
    with pytest.raises(UsageError, match="needs 'assistant_model'"):
        prep(num_assistant_tokens=4)
    with pytest.raises(UsageError, match="expects bool"):
        prep(deterministic="yes")
    with pytest.raises(UsageError, match="takes no engine options"):
        hf.load(str(model), {}, {"concurrency": 2})


def test_model_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UsageError, match="not found"):
        hf.resolve_model(str(tmp_path / "nope"))
    (tmp_path / "x.bin").write_bytes(b"junk")
    with pytest.raises(UsageError, match="not a GGUF"):
        hf.resolve_model(str(tmp_path / "x.bin"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no config.json"):
        hf.resolve_model(str(tmp_path / "empty"))
    with pytest.raises(UsageError) as err:
        hf.resolve_model("some-org/not-downloaded")
    assert "local Hugging Face cache" in str(err.value) and "\n" not in str(err.value)
