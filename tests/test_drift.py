"""Configuration drift against an accepted record: "exact match except ..." (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from abgate.compare.drift import configuration, drift, parse_allow
from abgate.errors import UsageError

DOC: dict[str, Any] = {
    "host": {"hostname": "a", "cores_logical": 2},
    "spec": {"env": {"OMP_NUM_THREADS": "2"}, "engine_args": {"n_ctx": 512},
             "engine_options": {}, "model": {"path": "/m.gguf", "sha256": "s" * 64}},
    "engine": {"name": "llamacpp", "version": "0.3.36",
               "effective_config": {"n_ctx": 512, "type_k": "f16"}},
    "provenance": {"environment": {"env": {"CUDA_VISIBLE_DEVICES": "0"},
                                   "packages": {"numpy": "2.4.6"}},
                   "libraries": [{"pid": 1, "libs": [{"path": "/x/libggml.so",
                                                     "sha256": "h" * 64}]}]},
}


def test_configuration_names_every_class() -> None:
    conf = configuration(DOC)
    assert conf["env.OMP_NUM_THREADS"] == "2" and conf["env.CUDA_VISIBLE_DEVICES"] == "0"
    assert conf["engine_args.n_ctx"] == 512 and conf["effective.type_k"] == "f16"
    assert conf["engine_version"] == "0.3.36" and conf["package.numpy"] == "2.4.6"
    assert conf["library.libggml.so"] == "h" * 64 and conf["model.sha256"] == "s" * 64
    assert conf["host.hostname"] == "a"


def test_a_malformed_section_reads_as_empty_not_as_a_crash() -> None:
    """The drift check reads records through the lenient views (``compare.views``): a
    section of the wrong type is empty, a list keeps only its objects."""
    doc = {**copy.deepcopy(DOC), "spec": "not an object", "engine": None}
    doc["provenance"]["libraries"] = ["junk", {"libs": "none"},
                                      {"libs": [7, {"path": "/y/libz.so", "sha256": "z"}]}]
    conf = configuration(doc)
    assert conf["library.libz.so"] == "z" and "library.libggml.so" not in conf
    assert conf["engine"] is None and not any(k.startswith("engine_args") for k in conf)
    assert conf["env.CUDA_VISIBLE_DEVICES"] == "0" and conf["host.hostname"] == "a"


def test_identical_records_are_an_exact_match() -> None:
    found = drift(configuration(DOC), configuration(copy.deepcopy(DOC)))
    assert found.passed and found.summary == "exact match" and not found.differences


def test_undeclared_drift_fails_naming_the_keys_and_allowed_drift_passes() -> None:
    now = copy.deepcopy(DOC)
    now["host"]["hostname"] = "b"
    now["provenance"]["environment"]["env"]["CUDA_VISIBLE_DEVICES"] = "1"
    now["spec"]["engine_args"]["flash_attn"] = True
    found = drift(configuration(DOC), configuration(now), parse_allow("host.*"))
    assert not found.passed
    assert found.unexplained == ["engine_args.flash_attn", "env.CUDA_VISIBLE_DEVICES"]
    assert found.summary == ("exact match except host.hostname (allowed); differs beyond "
                             "--allow-diff: engine_args.flash_attn, env.CUDA_VISIBLE_DEVICES")
    flash = [d for d in found.differences if d.key == "engine_args.flash_attn"][0]
    assert flash.recorded == "<absent>" and flash.current is True
    ok = drift(configuration(DOC), configuration(now),
               parse_allow(["host.*,env.CUDA_VISIBLE_DEVICES", "engine_args.flash_attn"]))
    assert ok.passed and ok.to_dict()["allow"] == ["host.*", "env.CUDA_VISIBLE_DEVICES",
                                                   "engine_args.flash_attn"]
    assert ok.summary.startswith("exact match except engine_args.flash_attn, ")


def test_an_unknown_class_is_a_usage_error_with_a_close_match() -> None:
    with pytest.raises(UsageError, match=r"unknown class 'hots'.*did you mean 'host'"):
        parse_allow("hots.*")
    assert parse_allow(None) == () and parse_allow(" , ") == ()


def test_a_launch_s_port_log_and_ready_time_are_not_configuration() -> None:
    a, b = copy.deepcopy(DOC), copy.deepcopy(DOC)
    for doc, port in ((a, 4001), (b, 4002)):
        doc["engine"]["effective_config"] |= {
            "endpoints": [f"http://127.0.0.1:{port}"], "server_ready_s": port / 1000,
            "launch": ["python", "-m", "llama_cpp.server", "--port", str(port)],
            "server_log": f"/runs/{port}/server.log"}
    found = drift(configuration(a), configuration(b))
    assert found.passed and found.summary == "exact match"
    assert "effective.server_ready_s" in found.not_compared
