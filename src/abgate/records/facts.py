"""Configuration facts: what may differ between two runs, stated once.

Every fact abgate compares between two runs (an A/B's arms, a baseline and its check, two
ledger records, a run and its resume) is a flat key ``CLASS.NAME`` in one vocabulary
(:data:`CLASSES`), matched against patterns by one rule (:func:`matches`), and compared
unless one list says it is not (:data:`MUST_MATCH` is the rule as data, as pyperf's
``_CHECKED_METADATA`` is: every class is compared, less :data:`PER_LAUNCH`, the facts
of one launch, and :data:`VOLATILE`, the figures that move between two loads of one build).

The users are :mod:`abgate.ab.declared` (an A/B's declared switches),
:mod:`abgate.compare.drift` (a baseline check's and the ledger's "exact match except"),
:mod:`abgate.report.contract` (an A/B report's "held equal") and
:func:`abgate.runner.records.iter_diff` (a resume's "the spec differs at"). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from abgate.errors import UsageError

# The one key vocabulary: class -> what its keys are. ``library`` is a shared object the
# engine's processes mapped (never a Python package: that is ``package``).
CLASSES: dict[str, str] = {
    "engine": "the engine's name (engine alone) as requested and loaded",
    "engine_version": "the engine's version as loaded",
    "model": "the model's identity: model alone its SHA-256, model.KEY a field of it",
    "engine_args": "an --engine-arg as given (the given facet)",
    "engine_options": "an engine option (served: --endpoint, --launch, ...)",
    "env": "an environment variable (the snapshot with the --env overrides)",
    "effective": "the engine's effective configuration after load (the effective facet)",
    "library": "the SHA-256 of a shared library (by file name) the engine's processes mapped",
    "package": "an installed Python package's version",
    "host": "the host: hostname, OS, Python, CPU, cores, memory, GPUs",
}

# The facts of one launch, not configuration: a launched server's port (in its endpoint
# URL and its filled command line), its log path, its readiness time, its /v1/models
# answer (a creation timestamp) and its health probe. Never compared; listed apart.
PER_LAUNCH: tuple[str, ...] = (
    "effective.endpoints", "effective.launch", "effective.server_log",
    "effective.server_ready_s", "effective.served_models", "effective.probe")
# Figures that move between two loads of one build (what the GPU holds when the snapshot
# is taken, what a memory profiler computed from it, the host's load, the load's time).
VOLATILE: tuple[str, ...] = (
    "host.gpus.*.memory_used", "host.gpus.*.memory_free", "host.memory_available",
    "host.load_*", "host.ram_available*", "effective.num_gpu_blocks",
    "effective.num_cpu_blocks", "effective.kv_cache_memory*",
    "effective.available_kv_cache_memory*", "effective.gpu_memory_used*",
    "effective.load_seconds")
# Effective keys that repeat the request (vLLM's requested_engine_args): they differ
# whenever the args do, so they are no evidence that an arg took effect.
ECHO: tuple[str, ...] = ("effective.requested_engine_args",)
# Effective keys that follow from the engine args as a whole (the digest of the model
# config the engine built: an hf_overrides arg changes it).
DERIVED: tuple[str, ...] = ("effective.hf_config_sha256",)

# The whole matching rule: class -> the patterns of its keys that are not compared
# ("per launch") or compared only when asked ("volatile"). Every other key must match.
MUST_MATCH: dict[str, dict[str, tuple[str, ...]]] = {
    cls: {"per_launch": tuple(p for p in PER_LAUNCH if p.startswith(cls + ".")),
          "volatile": tuple(p for p in VOLATILE if p.startswith(cls + "."))}
    for cls in CLASSES}

MISSING = "(not set)"


def matches(key: str, patterns: Iterable[str]) -> bool:
    """``key`` matches a pattern (:func:`fnmatch.fnmatchcase`), or lies below one
    (``host.gpus`` covers ``host.gpus.0.name``, ``model`` covers ``model.sha256``); a
    pattern without a dot that names no class also matches a key's name in any class
    (``flash_attn`` matches ``engine_args.flash_attn`` and ``effective.flash_attn``)."""
    tail = key.split(".", 1)[1] if "." in key else key
    return any(fnmatchcase(key, p) or key.startswith(p + ".")
               or ("." not in p and p not in CLASSES and fnmatchcase(tail, p))
               for p in patterns)


def per_launch(key: str) -> bool:
    """A fact of one launch (:data:`PER_LAUNCH`): never compared."""
    return matches(key, PER_LAUNCH)


def volatile(key: str) -> bool:
    """A figure that moves between two loads of one build (:data:`VOLATILE`)."""
    return matches(key, VOLATILE)


def must_match(key: str) -> bool:
    """Whether two runs must agree on ``key`` unless a pattern allows it to differ."""
    return not per_launch(key) and not volatile(key)


def unknown_class(pattern: str) -> str | None:
    """The class a dotted ``pattern`` starts with when it is no class of
    :data:`CLASSES` (and no wildcard), else None."""
    cls = pattern.split(".", 1)[0]
    if "." not in pattern or cls in CLASSES or any(c in cls for c in "*?["):
        return None
    return cls


def check_patterns(where: str, value: Any) -> tuple[str, ...]:
    """A list of key patterns from an experiment file (``changes``,
    ``allow_differences``): a one-line UsageError names a bad entry."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{where}: must be a list of key patterns such as "
                         f"[\"flash_attn\", \"env.*\"], got {value!r}")
    for pattern in value:
        if (group := unknown_class(pattern)) is not None:
            raise UsageError(f"{where}: {pattern!r}: unknown key group {group!r}; a dotted "
                             f"pattern starts with one of {', '.join(CLASSES)}")
    return tuple(value)


def libraries(mapped: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """``library`` facts of mapped shared objects, ``(path, sha256)`` pairs: the file
    name -> its SHA-256, or the sorted SHA-256s comma-joined when files of one name
    differ (pandas' and pyarrow's ``lib.cpython-312-*.so``, msgspec's and scipy's
    ``_core``): whichever was mapped last used to win, so two loads of one build
    differed by the order their modules were imported (seen: a baseline recorded in a
    Ray task against its check on a replica actor, on the H200). Paths without a hash
    (unreadable) are left out."""
    found: dict[str, set[str]] = {}
    for path, sha in mapped:
        if sha:
            found.setdefault(path.rstrip("/").rsplit("/", 1)[-1], set()).add(sha)
    return {name: ",".join(sorted(shas)) for name, shas in found.items()}


def text(value: Any) -> str:
    """A fact's value as compared text (JSON, keys sorted)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def group(prefix: str, table: Any) -> dict[str, str]:
    """``{prefix.KEY: text(value)}`` for a table's entries (one level)."""
    if not isinstance(table, Mapping):
        return {}
    return {f"{prefix}.{key}": text(value) for key, value in table.items()}


def flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """``value`` into ``out`` as ``prefix.KEY...`` leaves (a list of objects, such as the
    host's GPUs, by position: ``host.gpus.0.memory_used``)."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            flat(f"{prefix}.{k}", v, out)
    elif isinstance(value, list) and value and all(
            isinstance(v, Mapping) and v for v in value):
        for i, v in enumerate(value):
            flat(f"{prefix}.{i}", v, out)
    else:
        out[prefix] = value


def differing(base: Mapping[str, str], cand: Mapping[str, str]) -> dict[str, list[str]]:
    """Key -> [base value, candidate value] for every key whose values differ."""
    keys = sorted(set(base) | set(cand))
    return {k: [base.get(k, MISSING), cand.get(k, MISSING)] for k in keys
            if base.get(k, MISSING) != cand.get(k, MISSING)}


def iter_diff(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Paths where two JSON-like values differ (a resume's "the spec differs at")."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from iter_diff(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    elif a != b:
        yield path or "<root>"


def split_compared(keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """``keys`` as (compared, per-launch): what a report holds equal or shows differing,
    and what it lists as not compared."""
    return [k for k in keys if not per_launch(k)], [k for k in keys if per_launch(k)]
