"""A dict or list engine arg (vLLM's ``hf_overrides``) is recorded as JSON in the
effective configuration, not as its Python repr; the model configuration vLLM built is
recorded by digest, so an override the model ignores shows as no change."""

from __future__ import annotations

import json
import types
from typing import Any

from abgate.engines.vllm import engine as ve
from tests.test_vllm_engine import fake_vllm  # noqa: F401  (the stand-in vllm module)

ns = types.SimpleNamespace
jsonable, effective_config = ve.jsonable, ve.effective_config


def test_dicts_and_lists_are_json_values() -> None:
    value = {"rope_theta": 1.0, "rope_scaling": {"type": "linear", "factor": 2},
             "layers": (1, 2), "names": ["a"]}
    assert jsonable(value) == {"rope_theta": 1.0, "rope_scaling": {"type": "linear",
                                                                   "factor": 2},
                               "layers": [1, 2], "names": ["a"]}
    assert jsonable({1: {"x"}}) == {"1": ["x"]}


def test_describe_records_hf_overrides_as_a_json_object(fake_vllm: Any) -> None:  # noqa: F811
    engine = ve.load("some/model", {"hf_overrides": {"rope_theta": 1.0}}, {})
    try:
        eff = engine.describe().effective_config
    finally:
        engine.close()
    assert eff["requested_engine_args"]["hf_overrides"] == {"rope_theta": 1.0}
    assert '"hf_overrides": {"rope_theta": 1.0}' in json.dumps(eff["requested_engine_args"])


class _HfConfig:
    def __init__(self, **values: Any) -> None:
        self.values = values

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)


def test_the_built_model_config_is_recorded_by_digest() -> None:
    def eff(**hf: Any) -> dict[str, Any]:
        return effective_config(ns(vllm_config=ns(model_config=ns(
            dtype="bfloat16", hf_config=_HfConfig(**hf)))))

    base = eff(rope_theta=10000.0, rope_scaling=None)
    assert len(base["hf_config_sha256"]) == 64
    assert eff(rope_scaling=None, rope_theta=10000.0) == base  # canonical: key order
    assert eff(rope_theta=1.0, rope_scaling=None)["hf_config_sha256"] != \
        base["hf_config_sha256"]
