"""The served-engine options every engine-driving command takes (``run``, ``bench``,
``baseline record``): declared once, gathered into ``engine_options``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

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

# provenance flags, shared by run, ab, bench and baseline record
Contract = Annotated[str | None, typer.Option(
    help="Contract TOML checked before and after load.")]
Manifest = Annotated[str | None, typer.Option(
    help="Manifest JSON whose digest is embedded; refused when stale (made at another "
    "tree or with other uncommitted edits).")]
AllowStaleManifest = Annotated[bool, typer.Option(
    "--allow-stale-manifest", help="Record a stale --manifest as stale instead of refusing.")]

# CLI parameter name -> key in engine_options; unset ones are left out.
ENGINE_OPTIONS = {"endpoint": "endpoints", "launch": "launch", "concurrency": "concurrency",
                  "api": "api", "request_timeout": "request_timeout",
                  "api_key_env": "api_key_env", "ready_timeout": "ready_timeout"}


def engine_options(params: dict[str, Any]) -> dict[str, Any]:
    """``engine_options`` from a command's parameters (``ctx.params`` or ``locals()``)."""
    opts = {key: params.get(name) for name, key in ENGINE_OPTIONS.items()}
    if opts["endpoints"]:
        opts["endpoints"] = list(opts["endpoints"])
    return {k: v for k, v in opts.items() if v not in (None, [], ())}
