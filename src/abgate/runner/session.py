"""One engine session: how every command prepares, loads, isolates, describes and
cleans up an engine.

``abgate run``, ``ab``, ``bench`` and ``baseline`` all go through here:

1. :func:`prepare_engine` turns an :class:`EngineSpec` into a :class:`PreparedEngine`
   before anything loads: the engine's class (the registry's), engine args typed and
   validated (close matches for typos), engine options checked by its ``check_options``,
   the model resolved and identified (a file's or a directory's hashes, cached).
2. :func:`loaded` loads it under its env overrides (restored right after), records
   ``describe()``, the engine's own processes and their mapped libraries (and checks a
   contract on them), yields an :class:`EngineSession`, and on every way out closes the
   engine and records the cleanup evidence.
3. Work on the engine runs inside ``session.env()``, so that two resident arms with
   different env overrides never see each other's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abgate.engines import engine_class, hosted, keys
from abgate.engines.args import validate_args
from abgate.engines.base import Engine, EngineInfo
from abgate.engines.shared.multicast import applied_env as applied_env  # re-exported
from abgate.engines.shared.multicast import check_env as check_multicast_env
from abgate.errors import AbgateError
from abgate.identity import identify_model
from abgate.model_check import ModelStamp
from abgate.records import facts
from abgate.records.documents import Loadable, LoadFacts, RunRecord
from abgate.records.sections import CapabilitiesRecord, EngineRecord, ModelRef
from abgate.redact import add_known_secrets, env_secrets, redact, redact_env


@dataclass(frozen=True)
class EngineSpec:
    """Which engine, on which model, configured how: what a user chooses, as given."""

    engine: str = "llamacpp"
    model: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As recorded: secrets in args, options and env replaced by ``<redacted>``."""
        return recorded_engine_part(asdict(self))


@dataclass(frozen=True)
class PreparedEngine:
    """A validated :class:`EngineSpec`: nothing is loaded yet."""

    spec: EngineSpec
    engine_cls: type[Engine]  # the registry's class: its classmethods check and load
    model: str
    resolved_args: dict[str, Any]
    model_identity: ModelRef  # the spec's model, as identified
    # what hashing the model's files saw: every load checks they are still those bytes
    stamp: ModelStamp | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.spec.engine

    def record(self) -> dict[str, Any]:
        """The engine part of a run spec (what the spec digest covers)."""
        return recorded_engine_part({
            "engine": self.spec.engine, "model": self.model_identity.to_dict(),
            "engine_args": self.spec.args, "engine_options": self.spec.options,
            "resolved_engine_args": self.resolved_args, "env": self.spec.env})


_REDACTED_PARTS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    *((key, redact) for key in ("args", "options", "engine_args", "engine_options",
                                "resolved_engine_args")),
    ("env", redact_env))


def recorded_engine_part(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with its engine args, options (a ``--launch`` command, endpoint URLs) and
    env as a record may show them: secrets replaced by ``<redacted>``."""
    out = dict(d)
    for key, how in _REDACTED_PARTS:
        if key in out:
            out[key] = how(out[key])
    return out


def register_secrets(spec: EngineSpec) -> None:
    """Make the secret values this engine is given known to every redaction: the key
    ``--api-key-env`` names (whatever the variable is called) and the values of
    secret-named variables, of ``--env`` and of the environment."""
    key_env = keys.api_key_env(spec.options)
    add_known_secrets([os.environ.get(key_env) if key_env is not None else None,
                       *env_secrets(spec.env), *env_secrets(os.environ)])


def prepare_engine(spec: EngineSpec) -> PreparedEngine:
    """Validate everything about the engine that needs no load, in seconds."""
    register_secrets(spec)
    check_multicast_env(spec.env)  # NVLink multicast stays off (engines/shared/multicast.py)
    cls = engine_class(spec.engine)
    resolved = validate_args(spec.engine, spec.args, cls.arg_specs)
    cls.check_args(resolved)  # the engine's cross-argument checks, still before load
    hosted.check_interpreter(spec.options, cls)  # engine_options.python: another interpreter
    cls.check_options(hosted.engine_options(spec.options))
    model = cls.resolve_model(spec.model)
    identity, files = identify_model(model)
    return PreparedEngine(spec, cls, model, resolved, identity,
                          ModelStamp.of(identity, files))


def engine_processes(engine: Engine) -> list[int]:
    """The engine's own processes (root first): a launched server's tree, vLLM's
    workers, this process for an in-process engine; none for a remote endpoint."""
    return [int(p) for p in engine.processes()]


def described(info: EngineInfo) -> EngineRecord:
    """``describe()`` as the record's model: every capability kept, in its order."""
    return EngineRecord(name=info.name, version=info.version, model=info.model,
                        effective_config=info.effective_config,
                        capabilities=CapabilitiesRecord(**vars(info.capabilities)))


class EngineSession:
    """A loaded engine, the env it runs under and what was recorded about it."""

    def __init__(self, prepared: PreparedEngine, engine: Engine) -> None:
        self.prepared, self.engine = prepared, engine
        self.described = described(engine.describe())  # read by attribute, never by key
        self.processes = engine_processes(engine)

    @contextmanager
    def env(self) -> Iterator[None]:
        """Run work on this engine under its own env overrides, and the env its own
        processes were started with (``Engine.process_env``: NVLink multicast off for
        vLLM and launched servers), so the environment snapshot records it."""
        with applied_env({**self.prepared.spec.env, **self.engine.process_env}):
            yield


# Effective-config keys that differ between two loads of one configuration (a launched
# server's port, log and start-up time; vLLM's KV blocks, sized from free memory).
def record_engine(doc: Loadable, described: EngineRecord, run_dir: Path | None) -> None:
    """``doc["engine"]``: the first start's engine as loaded. A resume records its own
    under ``resumes[-1].engine`` and must load the same effective configuration (a
    changed CPU affinity changes llama.cpp's default thread count): else it is refused
    before any sample, naming what differs."""
    if isinstance(doc, LoadFacts):
        doc.engine = described.model_copy(deep=True)
        return
    first, resumes = doc.engine, doc.resumes if isinstance(doc, RunRecord) else []
    if not first.loaded or not resumes:
        first.load(described)  # the effective facet, beside the given and resolved ones
        return
    resumes[-1].engine = described.model_copy(deep=True)
    before, now = first.effective_config, described.effective_config
    diffs = [f"{k}: {before.get(k)!r} then, {now.get(k)!r} now"
             for k in sorted(set(before) | set(now))
             if facts.must_match(f"effective.{k}") and before.get(k) != now.get(k)]
    if diffs:
        raise AbgateError(f"--resume {run_dir}: the engine's effective configuration differs "
                          f"from the first start's ({'; '.join(diffs[:4])}); resume under the "
                          "same conditions, or start a new directory")


@contextmanager
def loaded(p: PreparedEngine, run_dir: Path | None = None,
           doc: Loadable | None = None) -> Iterator[EngineSession]:
    """Load ``p`` (under its env), yield the session, always close it.

    With ``doc``, the record gets ``engine`` (describe), ``engine_processes`` and, on the
    way out, ``cleanup`` (the engine's verified-cleanup evidence, where it starts
    processes).

    The model is checked before the load, right after it and when the work is done
    (:mod:`abgate.model_check`): a file changed since it was identified stops here."""
    python = hosted.interpreter(p.spec.options)
    if python is None:  # (a hosted engine's packages are checked in its host)
        p.engine_cls.check_packages()  # a missing package is one line, not an ImportError
    check_model(p, "before the load")
    with applied_env(p.spec.env):
        try:
            engine = _load(p, python, run_dir)
        except BaseException as exc:  # a launched server that never became ready: its
            if doc is not None:       # stop was verified (or not): say so in the record
                _failed_start_cleanup(doc, exc)
            raise
    try:
        check_model(p, "during the load")  # before describe(): not an arm difference
        session = EngineSession(p, engine)
        if doc is not None:
            record_engine(doc, session.described, run_dir)
            doc.engine_processes = list(session.processes)
        yield session
        check_model(p, "while it was loaded")  # a file rewritten under a mapped engine
    finally:
        with applied_env(p.spec.env):
            engine.close()
        if doc is not None:
            doc.cleanup = engine.cleanup_evidence


def _load(p: PreparedEngine, python: str | None, run_dir: Path | None) -> Engine:
    """The engine loaded here, or in a host process of ``python`` (engines/hosted.py)."""
    options = hosted.engine_options(p.spec.options) or None
    if python is None:
        return p.engine_cls.load(p.model, p.resolved_args, options, run_dir)
    return hosted.start(python, p.name, p.model, p.resolved_args, options, run_dir)


def check_model(p: PreparedEngine, when: str) -> None:
    """``p``'s model files still the bytes its spec names (``ModelChanged`` if not)."""
    if p.stamp is not None:
        p.stamp.check(when)


def _failed_start_cleanup(doc: Loadable, exc: BaseException) -> None:
    """The cleanup evidence an engine attached to its load failure (a launched server's
    whole tree stopped and checked), in the shape a closed engine leaves."""
    server = getattr(exc, "cleanup_evidence", None)
    if isinstance(server, dict):
        doc.cleanup = {"launched": True, "ready": False, "server": server,
                          "verified": keys.cleanup_verified(server)}
