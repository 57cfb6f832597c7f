"""Engines behind one base class, registered lazily by name.

Each factory below imports its adapter's module only when that engine is asked for
(:func:`engine_adapter`), so importing :mod:`abgate.engines` imports no engine library.
An adapter module provides ``ARG_SPECS`` (what ``--engine-arg`` accepts),
``resolve_model(model)`` and ``load(model, args, options=None, run_dir=None)`` (a
resident :class:`~abgate.engines.base.Engine`), and where it has them
``check_args``/``check_options``; the factory names each of them in a typed
:class:`~abgate.engines.registry.EngineAdapter`.
"""

from __future__ import annotations

from abgate.engines.registry import EngineAdapter, engine, engine_adapter, engine_names

__all__ = ["EngineAdapter", "engine", "engine_adapter", "engine_names"]

VLLM_HINT = "pip install 'abgate[vllm]' (on a machine vLLM supports)"


@engine("llamacpp")
def _llamacpp() -> EngineAdapter:
    from abgate.engines.llamacpp import engine as m

    return EngineAdapter("llamacpp", m.ARG_SPECS, m.resolve_model, m.load,
                         check_args=m.check_args, in_process=True,
                         requires=(("llama_cpp", "pip install llama-cpp-python"),))


@engine("openai")
def _openai() -> EngineAdapter:
    from abgate.engines.openai import engine as m

    return EngineAdapter("openai", m.ARG_SPECS, m.resolve_model, m.load,
                         check_options=m.check_options)


@engine("vllm")
def _vllm() -> EngineAdapter:
    from abgate.engines.vllm import engine as m

    return EngineAdapter("vllm", m.ARG_SPECS, m.resolve_model, m.load,
                         check_options=m.check_options, requires=(("vllm", VLLM_HINT),))


@engine("transformers")
def _transformers() -> EngineAdapter:
    from abgate.engines.transformers import engine as m
    from abgate.engines.transformers import options as o

    hint = "pip install 'abgate[transformers]'"
    return EngineAdapter("transformers", o.ARG_SPECS, o.resolve_model, m.load,
                         check_args=o.check_args, in_process=True,
                         requires=(("torch", hint), ("transformers", hint)))


@engine("fake")
def _fake() -> EngineAdapter:
    from abgate.engines import fake as m

    return EngineAdapter("fake", m.ARG_SPECS, m.resolve_model, m.load, in_process=True)
