from __future__ import annotations

import inspect

import pytest

from abgate.engines.args import coerce_value, parse_pairs, validate_args
from abgate.engines.llamacpp import engine as llamacpp
from abgate.errors import UsageError
from abgate.redact import redact_argv, redact_env


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True), ("False", False), ("null", None), ("None", None),
        ("42", 42), ("-7", -7), ("+3", 3), ("0.5", 0.5), ("-1e-3", -0.001), (".25", 0.25),
        ('{"a": 1}', {"a": 1}), ("[1, 2]", [1, 2]), ("q8_0", "q8_0"),
        ("hello world", "hello world"),
        ("", ""),
    ],
)
def test_coerce_value(raw: str, expected: object) -> None:
    got = coerce_value(raw)
    assert got == expected and type(got) is type(expected)


def test_bad_json_names_the_value() -> None:
    with pytest.raises(UsageError, match="looks like JSON"):
        coerce_value("{not json")


def test_parse_pairs_needs_equals() -> None:
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        parse_pairs(["flash_attn"], "--engine-arg")
    assert parse_pairs(["a=1", "a=2", "b=x=y"], "--engine-arg") == {"a": 2, "b": "x=y"}


def test_unknown_key_suggests_close_match() -> None:
    with pytest.raises(UsageError, match="unknown engine arg 'flash_atn'.*'flash_attn'"):
        validate_args("llamacpp", {"flash_atn": True}, llamacpp.ARG_SPECS)


def test_wrong_type_names_key_and_type() -> None:
    with pytest.raises(UsageError, match="'n_ctx' expects int, got string"):
        validate_args("llamacpp", {"n_ctx": "big"}, llamacpp.ARG_SPECS)
    with pytest.raises(UsageError, match="'flash_attn' expects bool, got int"):
        validate_args("llamacpp", {"flash_attn": 1}, llamacpp.ARG_SPECS)
    with pytest.raises(UsageError, match="'n_ctx' expects int, got float"):
        validate_args("llamacpp", {"n_ctx": 2.5}, llamacpp.ARG_SPECS)


def test_friendly_names_map_to_codes() -> None:
    got = validate_args("llamacpp", {"type_k": "q8_0", "type_v": "F16", "n_gpu_layers": -1,
                                     "rope_freq_base": 10000}, llamacpp.ARG_SPECS)
    assert got == {"type_k": 8, "type_v": 1, "n_gpu_layers": -1, "rope_freq_base": 10000.0}
    with pytest.raises(UsageError, match="unknown value 'q8'.*q8_0"):
        validate_args("llamacpp", {"type_k": "q8"}, llamacpp.ARG_SPECS)


def test_every_llamacpp_arg_exists_in_llama_signature() -> None:
    from llama_cpp import Llama

    params = set(inspect.signature(Llama.__init__).parameters)
    from abgate.engines.llamacpp.args import ADAPTER_ONLY

    # abgate's own switches, and use_extra_bufts: a model param Llama() takes no keyword
    # for (set on the defaults it reads, engine.model_params)
    assert {"prefix_cache", "use_extra_bufts"} == ADAPTER_ONLY
    assert set(llamacpp.ARG_SPECS) - ADAPTER_ONLY <= params
    import llama_cpp

    assert hasattr(llama_cpp.llama_model_default_params(), "use_extra_bufts")


def test_secrets_are_redacted() -> None:
    env = {"HF_TOKEN": "abc", "OPENAI_API_KEY": "sk", "DB_PASSWORD": "p", "OMP_NUM_THREADS": "2"}
    assert redact_env(env) == {"HF_TOKEN": "<redacted>", "OPENAI_API_KEY": "<redacted>",
                               "DB_PASSWORD": "<redacted>", "OMP_NUM_THREADS": "2"}


def test_argv_secrets_are_redacted() -> None:
    argv = ["serve", "--api-key", "sk-123", "--hf-token=abc", "--port", "8000", "--model", "m"]
    assert redact_argv(argv) == ["serve", "--api-key", "<redacted>", "--hf-token=<redacted>",
                                 "--port", "8000", "--model", "m"]
