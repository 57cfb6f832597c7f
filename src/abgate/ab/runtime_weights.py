"""``abgate weights-diff --engine``: the weights two arms actually run, read from the
loaded engines and diffed (:func:`diff_arms`).

Arm A is loaded, every weight read (float32, in memory: 4 bytes per parameter) and the
engine closed; then arm B is loaded and compared tensor by tensor against it, so one
arm holds the device at a time. An engine that cannot expose its weights (a served
endpoint) is refused before anything is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abgate.engines.base import LoadedTensor
from abgate.errors import UsageError
from abgate.identity import digest_json
from abgate.records import facts
from abgate.runner.session import EngineSpec, PreparedEngine, loaded, prepare_engine
from abgate.weights.diff import Progress
from abgate.weights.runtime import diff_loaded

__all__ = ["diff_arms", "read_arm"]

_SERVED = frozenset({"openai"})


def diff_arms(spec_a: EngineSpec, spec_b: EngineSpec,
              progress: Progress | None = None) -> dict[str, Any]:
    """The weights diff of arm B's loaded model against arm A's (both prepared first:
    bad input is refused before either loads)."""
    prepared = [prepare_engine(spec) for spec in (spec_a, spec_b)]
    for p in prepared:
        if p.spec.engine in _SERVED:
            raise UsageError(f"engine {p.spec.engine!r} serves over HTTP and cannot expose "
                             "its loaded weights (llamacpp, transformers, vllm can)")
    held, ref_id = read_arm(prepared[0])
    prep_b = prepared[1]
    with loaded(prep_b) as session:
        other = session.engine.loaded_weights()
        if other is None:
            raise UsageError(f"engine {prep_b.spec.engine!r} cannot expose its loaded weights")
        return diff_loaded(held, other, ref_id, identity(prep_b, session.info), progress)


def read_arm(p: PreparedEngine) -> tuple[dict[str, LoadedTensor], dict[str, Any]]:
    """Load ``p``, read its weights into memory, close it: (tensors, identity)."""
    with loaded(p) as session:
        tensors = session.engine.loaded_weights()
        if tensors is None:
            raise UsageError(f"engine {p.spec.engine!r} cannot expose its loaded weights")
        held = {name: LoadedTensor(t.dtype, t.shape, _const(t.read()))
                for name, t in tensors.items()}
        return held, identity(p, session.info)


def identity(p: PreparedEngine, info: dict[str, Any]) -> dict[str, Any]:
    """What a side of a runtime diff was: engine, model by name, SHA-256, config digest."""
    effective = {k: v for k, v in (info.get("effective_config") or {}).items()
                 if facts.must_match(f"effective.{k}")}
    return {"engine": p.spec.engine, "model": Path(p.model).name,
            "sha256": p.model_identity.get("sha256"),
            "size_bytes": p.model_identity.get("size"),
            "engine_args": dict(p.resolved_args),
            "config_digest": digest_json(effective)}


def _const(array: Any) -> Any:
    def read() -> Any:
        return array
    return read
