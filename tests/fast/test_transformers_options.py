"""The transformers engine args as a pydantic model (``engines/transformers/options.Args``):
checked without torch, through the one error mapping, one line each."""

from __future__ import annotations

import os
import typing
from typing import Any

import pytest

from abgate.engines.transformers import options as o
from abgate.errors import UsageError


@pytest.mark.parametrize(("args", "message"), [
    ({"max_cache_len": 0, "cache_implementation": "static"}, "max_cache_len must be >= 1, got 0"),
    ({"num_assistant_tokens": -2}, "num_assistant_tokens must be >= 1, got -2"),
    ({"device_map": 5}, "device_map expects a string or a JSON object, got 5"),
    ({"deterministic": "yes"}, "engine arg 'deterministic' expects bool, got 'yes'"),
    ({"seed": True}, "engine arg 'seed' expects int, got True"),
    ({"max_cache_len": "big"}, "engine arg 'max_cache_len' expects int, got 'big'"),
    ({"cache_implementaton": "static"},
     "unknown engine arg 'cache_implementaton' (did you mean 'cache_implementation'"),
    ({"cache_implementation": "statc"}, "(did you mean 'static'?)"),
    ({"attn_implementation": 3}, "engine arg 'attn_implementation' expects str, got 3"),
    ({"device": "cpu", "device_map": "auto"}, "'device' and 'device_map' exclude each other"),
    ({"max_cache_len": 64}, "needs cache_implementation=static or offloaded_static"),
    ({"compile": False, "compile_mode": "default"}, "'compile_mode' contradicts compile=false"),
    ({"num_assistant_tokens": 4}, "'num_assistant_tokens' needs 'assistant_model'"),
    ({"assistant_model": "x", "prompt_lookup_num_tokens": 3}, "two kinds of speculative"),
])
def test_bad_args_are_one_line_errors(args: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        o.check_args(args)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_good_args_pass_and_defaults_come_from_the_model() -> None:
    o.check_args({"dtype": "fp16", "device_map": {"": 0}, "cache_implementation": "static",
                  "max_cache_len": 64, "compile": True, "compile_mode": "max-autotune",
                  "prompt_lookup_num_tokens": 3, "attn_implementation": None})
    assert o.DEFAULTS == {"dtype": "auto", "cache_implementation": "dynamic", "seed": 0,
                          "load_format": "auto", "score_mode": "decode",
                          "deterministic": False}
    assert set(o.ARG_SPECS) == set(o.Args.__pydantic_fields__)
    assert set(o.ARG_SPECS["dtype"].choices) == set(o.DTYPES) == set(typing.get_args(o.Dtype))


def test_deterministic_needs_cublas_workspace_before_cuda(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``determinism.prepare`` on a stand-in torch (no torch, no CUDA needed): the CPU
    needs nothing; on CUDA the fixed cuBLAS workspace is set before CUDA starts, a
    wrong value or a started CUDA is refused in one line. (Was in the engine tier's
    test_engine_transformers.py, which loads a real model; this loads none.)"""
    from abgate.engines.transformers import determinism as det

    class FakeCuda:
        started = False

        def is_initialized(self) -> bool:
            return self.started

    class FakeTorch:
        cuda = FakeCuda()

    monkeypatch.delenv(det.CUBLAS_VAR, raising=False)
    det.prepare(FakeTorch, True, on_cuda=False)  # the CPU needs nothing
    assert det.CUBLAS_VAR not in os.environ
    det.prepare(FakeTorch, False, on_cuda=True)
    assert det.CUBLAS_VAR not in os.environ
    det.prepare(FakeTorch, True, on_cuda=True)  # unset, CUDA not started: set here
    assert os.environ[det.CUBLAS_VAR] == ":4096:8"
    monkeypatch.setenv(det.CUBLAS_VAR, ":0:0")
    with pytest.raises(UsageError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8 before CUDA"):
        det.prepare(FakeTorch, True, on_cuda=True)
    monkeypatch.delenv(det.CUBLAS_VAR)
    FakeTorch.cuda.started = True
    with pytest.raises(UsageError, match="CUDA has already started") as err:
        det.prepare(FakeTorch, True, on_cuda=True)
    assert "\n" not in str(err.value)
    monkeypatch.setenv(det.CUBLAS_VAR, ":16:8")
    det.prepare(FakeTorch, True, on_cuda=True)  # already deterministic: fine
