"""The engine options every engine-driving command takes (``run``, ``bench``,
``baseline record``, and ``ab`` without an experiment file): declared once, as one group
(:func:`engine_group`), read as one :class:`EngineFlags`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Annotated, Any, TypeVar

import typer

from abgate.engines.args import parse_pairs

Endpoint = Annotated[list[str] | None, typer.Option(
    "--endpoint", help="openai engine: server URL, repeatable (replicas).")]
Launch = Annotated[str | None, typer.Option(
    help='openai engine: start "CMD ... --port {port}".')]
Concurrency = Annotated[int | None, typer.Option(
    min=1, help="Requests in flight (served engines, vllm).")]
Api = Annotated[str | None, typer.Option(help="openai engine: chat (default) or completions.")]
RequestTimeout = Annotated[float | None, typer.Option(
    help="openai engine: seconds per request.")]
ApiKeyEnv = Annotated[str | None, typer.Option(
    help="openai engine: env var holding the API key.")]
ReadyTimeout = Annotated[float | None, typer.Option(
    help="--launch: seconds to wait for the server.")]
Python = Annotated[str | None, typer.Option(
    help="Run the in-process engine in this Python interpreter, in a process of its own "
    "(e.g. a revision's venv: its engine library, this abgate).")]
EngineName = Annotated[str | None, typer.Option(help="Engine name (default: llamacpp).")]
Model = Annotated[str | None, typer.Option(
    help="Model (llamacpp: PATH.gguf; default SmolLM2-135M).")]
EngineArg = Annotated[list[str] | None, typer.Option(
    "--engine-arg", help="KEY=VALUE engine argument, repeatable.")]
Env = Annotated[list[str] | None, typer.Option(
    "--env", help="KEY=VALUE env override, repeatable.")]

# provenance flags, shared by run, ab, bench and baseline record
Contract = Annotated[str | None, typer.Option(
    help="Contract TOML checked before and after load.")]
Manifest = Annotated[str | None, typer.Option(
    help="Manifest JSON whose digest is embedded; refused when stale (made at another "
    "tree or with other uncommitted edits).")]
AllowStaleManifest = Annotated[bool, typer.Option(
    "--allow-stale-manifest", help="Record a stale --manifest as stale instead of refusing.")]

DEFAULT_ENGINE = "llamacpp"

# CLI parameter name -> key in engine_options; unset ones are left out.
ENGINE_OPTIONS = {"endpoint": "endpoints", "launch": "launch", "concurrency": "concurrency",
                  "api": "api", "request_timeout": "request_timeout",
                  "api_key_env": "api_key_env", "ready_timeout": "ready_timeout",
                  "python": "python"}

# the group: parameter name -> (its Typer annotation, its default)
GROUP: dict[str, tuple[Any, Any]] = {
    "engine": (EngineName, None), "model": (Model, None),
    "engine_arg": (EngineArg, None), "env": (Env, None), "endpoint": (Endpoint, None),
    "launch": (Launch, None), "concurrency": (Concurrency, None), "api": (Api, None),
    "request_timeout": (RequestTimeout, None), "api_key_env": (ApiKeyEnv, None),
    "ready_timeout": (ReadyTimeout, None), "python": (Python, None)}


def engine_options(params: dict[str, Any]) -> dict[str, Any]:
    """``engine_options`` from a command's parameters (``ctx.params`` or ``locals()``)."""
    opts = {key: params.get(name) for name, key in ENGINE_OPTIONS.items()}
    if opts["endpoints"]:
        opts["endpoints"] = list(opts["endpoints"])
    return {k: v for k, v in opts.items() if v not in (None, [], ())}


@dataclass(frozen=True)
class EngineFlags:
    """The engine group's values as given on the command line."""

    engine: str | None = None  # None: not given (llamacpp)
    model: str | None = None
    engine_arg: list[str] | None = None
    env: list[str] | None = None
    endpoint: list[str] | None = None
    launch: str | None = None
    concurrency: int | None = None
    api: str | None = None
    request_timeout: float | None = None
    api_key_env: str | None = None
    ready_timeout: float | None = None
    python: str | None = None

    @property
    def engine_name(self) -> str:
        return self.engine or DEFAULT_ENGINE

    @property
    def engine_args(self) -> dict[str, Any]:
        return parse_pairs(self.engine_arg or [], "--engine-arg")

    @property
    def env_vars(self) -> dict[str, str]:
        return parse_pairs(self.env or [], "--env", coerce=False)

    @property
    def options(self) -> dict[str, Any]:
        return engine_options(vars(self))

    def spec(self) -> dict[str, Any]:
        """The engine part of a config (``RunConfig``, ``BenchConfig``) as keywords."""
        return {"engine": self.engine_name, "model": self.model, "engine_args": self.engine_args,
                "env": self.env_vars, "engine_options": self.options}

    def given(self) -> list[str]:
        """The flags of the group given (not at their defaults), as ``--flag``."""
        return ["--" + f.name.replace("_", "-") for f in fields(self)
                if getattr(self, f.name) not in (f.default, [], ())]


F = TypeVar("F", bound=Callable[..., Any])


def engine_group(func: F) -> F:
    """Give the command ``func`` the engine group's options; ``func`` takes them as one
    keyword, ``flags: EngineFlags``."""
    sig = inspect.signature(func, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "flags"]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                               default=default) for name, (kind, default) in GROUP.items()]

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        flags = EngineFlags(**{name: kwargs.pop(name) for name in GROUP})
        return func(*args, flags=flags, **kwargs)

    command.__signature__ = sig.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in (*own, *added)
                               if p.annotation is not inspect.Parameter.empty}
    return command  # type: ignore[return-value]


FLAGS = EngineFlags()  # the default of a command's ``flags`` (the group fills it)
