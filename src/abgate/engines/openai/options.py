"""Options and engine-arg rules of the ``openai`` engine, checked before anything starts.

``engine_options`` (what ``abgate run`` fills from ``--endpoint``, ``--launch``,
``--concurrency``, ``--api``, ``--request-timeout``, ``--api-key-env``,
``--ready-timeout``) are typed here, because they may also come from a file. Engine
args of a served engine are the launched server's own flags, so any flag-shaped key
is accepted as written.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic.dataclasses import dataclass

from abgate.engines.args import ArgSpec
from abgate.errors import UsageError
from abgate.redact import redact_url
from abgate.schema import FORBID, Float, Int, Str, StrList, Style, validated

_KEY = r"[A-Za-z0-9][A-Za-z0-9_.-]*"


class _ServerFlags(Mapping[str, ArgSpec]):
    """Engine args of a served engine are the launched server's own flags: any
    flag-shaped key is accepted as written, with any JSON-like value."""

    def __getitem__(self, key: str) -> ArgSpec:
        if not re.fullmatch(_KEY, key):
            raise UsageError(f"engine arg {key!r} is not a server flag name")
        return ArgSpec(key, object, "server flag", nullable=True)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


ARG_SPECS: Mapping[str, ArgSpec] = _ServerFlags()


def _listed(value: Any) -> Any:
    """One ``--endpoint`` may be given as a string."""
    return [value] if isinstance(value, str) else value


OPTIONS = Style(noun="option", must="expects")


@dataclass(frozen=True, config=FORBID)
class Options:
    """``engine_options`` for this engine (what ``abgate run`` fills from its flags): a
    pydantic model, so options from a file are typed as flags are."""

    endpoints: Annotated[StrList, BeforeValidator(_listed)] = ()
    launch: Str | None = None
    concurrency: Int = 1
    api: Str = "chat"
    request_timeout: Float = 600.0
    retries: Int = 2
    api_key_env: Str | None = None
    ready_timeout: Float = 600.0
    grace_s: Float = 10.0
    bool_style: Str = "auto"

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Options:
        o = validated(cls, raw, "engine options of 'openai'", style=OPTIONS)
        o.check()
        return o

    def check(self) -> None:
        if self.endpoints and self.launch:
            raise UsageError("give --endpoint URL or --launch CMD, not both")
        if not (self.endpoints or self.launch):
            raise UsageError("the openai engine needs --endpoint URL (repeatable) or "
                             "--launch \"CMD ... --port {port}\"")
        for url in self.endpoints:
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"--endpoint {redact_url(url)!r}: expected http://HOST:PORT")
        if self.concurrency < 1 or self.retries < 0:
            raise UsageError("--concurrency must be >= 1 and retries >= 0")
        if self.api not in ("chat", "completions"):
            raise UsageError(f"--api {self.api!r}: expected chat or completions")
        if min(self.request_timeout, self.ready_timeout, self.grace_s) <= 0:
            raise UsageError("timeouts must be > 0 seconds")
        if self.bool_style not in ("auto", "flag", "value"):
            raise UsageError(f"bool_style {self.bool_style!r}: expected auto, flag or value")
        if self.launch:
            check_launch(self.launch)


def check_launch(template: str) -> None:
    """The ``--launch`` command checked before anything is written: it splits, has
    ``{port}``, and its program exists (on PATH, or as an executable file)."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"--launch: cannot split the command: {exc}") from None
    if not words:
        raise UsageError("--launch: empty command")
    if not any("{port}" in w for w in words):
        raise UsageError("--launch: the command must contain {port} (abgate picks a free "
                         "loopback port)")
    program = words[0]
    if "{" not in program and shutil.which(program) is None:
        raise UsageError(f"--launch: program {program!r} not found (not on PATH, or not "
                         "an executable file)")


def check_options(options: Mapping[str, Any]) -> None:
    """Validate engine options without loading anything (for early checks)."""
    Options.parse(options)


def api_key(name: str | None) -> str | None:
    if name is None:
        return None
    key = os.environ.get(name)
    if not key:
        raise UsageError(f"--api-key-env {name}: that environment variable is not set")
    return key


def check_llama_cpp_concurrency(opts: Options, args: Mapping[str, Any]) -> None:
    """llama_cpp.server ends a streaming request as soon as another one arrives unless
    told not to; with concurrency that would turn samples into errors."""
    cmd = opts.launch or ""
    if "llama_cpp.server" in cmd and opts.concurrency > 1 \
            and "interrupt_requests" not in cmd and "interrupt_requests" not in args:
        raise UsageError("--concurrency > 1 with llama_cpp.server needs --interrupt_requests "
                         "false in --launch (else the server cuts streams short)")
