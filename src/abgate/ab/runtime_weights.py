"""``abgate weights-diff --engine``: the weights two arms actually run, read from the
loaded engines and diffed (:func:`diff_arms`).

Arm A is loaded, every weight read (float32, in memory: 4 bytes per parameter) and the
engine closed; then arm B is loaded and compared tensor by tensor against it, so one
arm holds the device at a time. An engine that cannot expose its weights (a served
endpoint) is refused before anything is loaded.

In an A/B, ``[evidence] weights = true`` (:func:`weights_evidence`) reads each arm's
weights right after its load (held in memory, float32, until the baseline and that arm
are both read) and writes ``weights-diff-<candidate>.json`` into the A/B directory: the
layer x projection table of the arms' actual models, each side tied to its model SHA-256
and engine config digest, rendered by the report.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from abgate.engines.base import LoadedTensor
from abgate.errors import UsageError
from abgate.identity import digest_json
from abgate.records import facts
from abgate.records.sections import EngineRecord
from abgate.runner.session import EngineSpec, PreparedEngine, loaded, prepare_engine
from abgate.weights.diff import Progress, arm_diff_path, write_diff
from abgate.weights.runtime import diff_loaded

__all__ = ["check_exposable", "diff_arms", "read_arm", "weights_evidence"]

_SERVED = frozenset({"openai"})
log = logging.getLogger("abgate.ab")
Held = dict[str, tuple[dict[str, LoadedTensor], dict[str, Any]]]  # arm -> (tensors, identity)


def check_exposable(engines: dict[str, str]) -> None:
    """Refuse (before any load) an arm whose engine serves over HTTP: arm -> engine."""
    for arm, engine in engines.items():
        if engine in _SERVED:
            raise UsageError(f"[evidence] weights: arm {arm!r}'s engine {engine!r} serves "
                             "over HTTP and cannot expose its loaded weights")


def weights_evidence(held: Held, arm: str, baseline: str, p: PreparedEngine,
                     info: EngineRecord, tensors: dict[str, LoadedTensor] | None,
                     out: Path) -> list[Path]:
    """``arm``'s loaded ``tensors`` held (a copy in memory); every candidate held with
    the baseline diffed into ``out/weights-diff-<candidate>.json`` and let go. An engine
    that exposes none is logged and skipped."""
    if tensors is None:
        log.warning("[evidence] weights: engine %r of arm %r cannot expose its loaded "
                    "weights; no weights diff for it", p.spec.engine, arm)
        return []
    held[arm] = ({name: LoadedTensor(t.dtype, t.shape, _const(t.read()))
                  for name, t in tensors.items()}, identity(p, info))
    written = []
    for cand in [a for a in held if a != baseline and baseline in held]:
        doc = diff_loaded(held[baseline][0], held[cand][0], held[baseline][1], held[cand][1])
        written.append(write_diff(arm_diff_path(out, cand), doc))
        del held[cand]
    return written


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
        return diff_loaded(held, other, ref_id, identity(prep_b, session.described), progress)


def read_arm(p: PreparedEngine) -> tuple[dict[str, LoadedTensor], dict[str, Any]]:
    """Load ``p``, read its weights into memory, close it: (tensors, identity)."""
    with loaded(p) as session:
        tensors = session.engine.loaded_weights()
        if tensors is None:
            raise UsageError(f"engine {p.spec.engine!r} cannot expose its loaded weights")
        held = {name: LoadedTensor(t.dtype, t.shape, _const(t.read()))
                for name, t in tensors.items()}
        return held, identity(p, session.described)


def identity(p: PreparedEngine, info: EngineRecord) -> dict[str, Any]:
    """What a side of a runtime diff was: engine, model by name, SHA-256, config digest."""
    effective = {k: v for k, v in info.effective_config.items()
                 if facts.must_match(f"effective.{k}")}
    return {"engine": p.spec.engine, "model": Path(p.model).name,
            "sha256": p.model_identity.sha256,
            "size_bytes": p.model_identity.size,
            "engine_args": dict(p.resolved_args),
            "config_digest": digest_json(effective)}


def _const(array: Any) -> Any:
    def read() -> Any:
        return array
    return read
