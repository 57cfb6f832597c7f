"""An in-process engine run by another Python interpreter: ``engine_options.python``.

A revision A/B (``abgate ab --rev``, :mod:`abgate.ab.revisions`) builds each revision
into a venv of its own. An engine that runs inside abgate's process (llama.cpp, vLLM,
transformers) must then run the *revision's* library, not the one abgate was installed
with. With ``engine_options = { python = "{build}/venv/bin/python" }`` the engine is
loaded in a host process started with that interpreter, and abgate talks to it through
:class:`HostedEngine`: an :class:`~abgate.engines.base.Engine` whose every member is
one request over a socket pair (abgate's own types, pickled; each generation result
comes back the moment it finishes, as ``on_result`` promises).

- **The revision's packages win.** The host runs ``python -I`` (no PYTHONPATH, no user
  site) and appends abgate's own directory *after* the interpreter's site-packages: the
  engine's library comes from the revision's venv, abgate (and what it needs but the venv
  lacks) from this installation, whatever abgate the interpreter has installed.
- **Provenance sees the host.** ``processes()`` are the host's (its pid and the
  engine's workers), so the manifest maps the libraries the revision's build loaded.
- **Nothing outlives abgate.** The host gets SIGTERM when abgate dies (its parent-death
  signal, SIGKILL of abgate included) and sits in a session of its own (a Ctrl-C meant for
  abgate does not cut a request short); ``close`` closes the engine, waits for the host to
  exit and records what it checked in ``cleanup_evidence``.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil

import abgate
from abgate.engines.base import (
    Capabilities,
    Engine,
    GenerationRequest,
    GenerationResult,
    LoadedTensor,
    OnResult,
)
from abgate.engines.proxy import ProxyEngine
from abgate.engines.registry import engine_class
from abgate.engines.shared.server import die_with_parent
from abgate.engines.shared.server_cleanup import running
from abgate.errors import AbgateError, UsageError

OPTION = "python"  # engine_options.python: the interpreter that hosts the engine
_PACKAGE = Path(abgate.__file__).resolve().parent
# The host imports this abgate from its files whatever the interpreter has installed (an
# editable install of another checkout, an older abgate), then appends the directory it
# sits in to sys.path: after the interpreter's own site-packages, so the engine's
# library is the interpreter's.
_BOOT = ("import importlib.util as u, sys; "
         "s = u.spec_from_file_location('abgate', {init!r}, "
         "submodule_search_locations=[{package!r}]); "
         "m = sys.modules['abgate'] = u.module_from_spec(s); s.loader.exec_module(m); "
         "sys.path.append({root!r}); "
         "from abgate.engines.hosted import serve; serve({fd})")
# members forwarded as they are (arguments and results are abgate's picklable types)
_CALLS = frozenset({"tokenize", "render_prompt", "describe", "score", "processes",
                    "detokenize", "topk_trace", "keep_prompt_states"})
CLOSE_WAIT_S = 30.0


def interpreter(options: Mapping[str, Any]) -> str | None:
    """The interpreter ``options`` names for the engine, or None (abgate's own process)."""
    value = options.get(OPTION)
    return value if isinstance(value, str) else None


def engine_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as the engine itself takes them: without ``python``."""
    return {k: v for k, v in options.items() if k != OPTION}


def check_interpreter(options: Mapping[str, Any], cls: type[Engine]) -> None:
    """A one-line UsageError for a ``python`` option that cannot host ``cls``."""
    if OPTION not in options:
        return
    value = options[OPTION]
    if not isinstance(value, str) or not value:
        raise UsageError(f"engine_options.{OPTION}: expected the path of a Python "
                         f"interpreter, got {value!r}")
    if not cls.in_process:
        raise UsageError(f"engine_options.{OPTION}: engine {cls.name!r} does not run in "
                         "abgate's process; name the interpreter in its launch command")
    if "{" not in value and shutil.which(value) is None:  # ({build}: checked once built)
        raise UsageError(f"engine_options.{OPTION}: {value!r} is not an executable file")


@dataclass(frozen=True)
class HostFacts:
    """What the host answers to a load: the engine's fixed members and the host's own."""

    capabilities: Capabilities
    process_env: dict[str, str]
    text_stable: bool


def start(python: str, name: str, model: str, args: Mapping[str, Any],
          options: Mapping[str, Any] | None, run_dir: Path | None) -> HostedEngine:
    """Engine ``name`` loaded in a host process of ``python`` (refused in one line when it
    cannot import this abgate or the engine's packages)."""
    ours, theirs = socket.socketpair()
    try:
        proc = subprocess.Popen(
            [python, "-I", "-c", _BOOT.format(init=str(_PACKAGE / "__init__.py"),
                                              package=str(_PACKAGE), root=str(_PACKAGE.parent),
                                              fd=theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=2,
            start_new_session=True, preexec_fn=die_with_parent)
    except OSError as exc:
        ours.close()
        raise UsageError(f"engine_options.{OPTION}: cannot start {python!r}: "
                         f"{exc.strerror}") from None
    finally:
        theirs.close()
    engine = HostedEngine(python, Connection(ours.detach()), proc)
    try:
        engine.attach(engine.call("load", name, model, dict(args), dict(options or {}),
                                  run_dir))
    except BaseException:
        engine.close()
        raise
    return engine


class HostedEngine(ProxyEngine):
    """The proxy of an engine loaded in a host process (:func:`start` makes one)."""

    loaded_by = "abgate.engines.hosted.start"

    def __init__(self, python: str, conn: Connection, proc: subprocess.Popen[bytes]) -> None:
        self.python, self._conn, self._proc = python, conn, proc
        self._closed = False
        self._text_stable = False
        self.capabilities = Capabilities(False, False, False, False)  # until attached

    def attach(self, facts: HostFacts) -> None:
        self.capabilities, self.process_env = facts.capabilities, facts.process_env
        self._text_stable = facts.text_stable

    def call(self, op: str, *args: Any, on_result: OnResult | None = None) -> Any:
        """One request to the host: its answer, or its exception raised here."""
        if self._closed:
            raise AbgateError(f"the engine host {self.python} is closed")
        try:
            self._conn.send((op, args))
            while True:
                kind, value = self._conn.recv()
                if kind == "result" and on_result is not None:
                    on_result(value)
                elif kind == "error":
                    raise value
                elif kind == "ok":
                    return value
        except (EOFError, OSError):
            code = self._proc.poll() if self._proc.poll() is not None else "still running"
            raise AbgateError(f"the engine host {self.python} (pid {self._proc.pid}) went "
                              f"away during {op} (exit code {code})") from None

    def generate(self, requests: Sequence[GenerationRequest],
                 on_result: OnResult | None = None) -> list[GenerationResult]:
        """Each result handed to ``on_result`` as the host finishes it."""
        return list(self.call("generate", list(requests), on_result=on_result))

    @property
    def text_stable(self) -> Callable[[list[int]], bool] | None:
        return partial(self.call, "text_stable") if self._text_stable else None

    def loaded_weights(self) -> dict[str, LoadedTensor] | None:
        shapes: dict[str, tuple[str, tuple[int, ...]]] | None = self.call("weights")
        if shapes is None:
            return None
        return {name: LoadedTensor(dtype, shape, partial(self.call, "read_weight", name))
                for name, (dtype, shape) in shapes.items()}

    def close(self) -> None:
        """Close the engine in the host, wait for the host to exit (SIGKILL after
        ``CLOSE_WAIT_S``) and record that nothing of it is left."""
        if self._closed:
            return
        tree = _tree(self._proc.pid)
        evidence: Any = None
        try:
            evidence = self.call("close")
        except Exception as exc:  # noqa: BLE001 - the host died or the engine's close failed
            evidence = {"error": f"{type(exc).__name__}: {exc}", "verified": False}
        self._closed = True
        self._conn.close()
        try:
            code = self._proc.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        survivors = [p.pid for p in tree if running(p)]
        for p in tree:
            if running(p):
                p.kill()
        engine_ok = not isinstance(evidence, dict) or bool(evidence.get("verified", True))
        self.cleanup_evidence = {
            "hosted": {"python": self.python, "pid": self._proc.pid, "exit_code": code,
                       "survivors": survivors},
            "engine": evidence, "verified": not survivors and engine_ok}


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


# -- the host side ----------------------------------------------------------------------


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling both ways, else an AbgateError of its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception may be unpicklable
        return AbgateError(f"{type(exc).__name__}: {exc}")


class _Host:
    """The host's end: one engine, one request at a time."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.engine: Engine | None = None
        self.weights: dict[str, LoadedTensor] | None = None

    def load(self, name: str, model: str, args: dict[str, Any], options: dict[str, Any],
             run_dir: Path | None) -> HostFacts:
        cls = engine_class(name)
        cls.check_packages()
        engine = self.engine = cls.load(model, args, options or None, run_dir)
        return HostFacts(engine.capabilities, dict(engine.process_env),
                         engine.text_stable is not None)

    def answer(self, op: str, args: tuple[Any, ...]) -> Any:
        if op == "load":
            return self.load(*args)
        engine = self.engine
        if engine is None:
            raise AbgateError(f"engine host: {op} before load")
        if op == "generate":
            return engine.generate(args[0], lambda r: self.conn.send(("result", r)))
        if op in _CALLS:
            return getattr(engine, op)(*args)
        if op == "prompts_restored":
            return engine.prompts_restored
        if op == "text_stable":
            check = engine.text_stable
            return None if check is None else check(*args)
        if op == "weights":
            self.weights = engine.loaded_weights()
            return None if self.weights is None else \
                {n: (t.dtype, tuple(t.shape)) for n, t in self.weights.items()}
        if op == "read_weight":
            return (self.weights or {})[args[0]].read()
        raise AbgateError(f"engine host: unknown request {op!r}")

    def close(self) -> Any:
        if self.engine is None:
            return None
        engine, self.engine = self.engine, None
        engine.close()
        return engine.cleanup_evidence


def serve(fd: int) -> None:
    """The host process's loop (``python -I -c``, started by :func:`start`): answer
    requests until ``close`` or until abgate's end of the socket closes."""
    host = _Host(Connection(fd))
    try:
        while True:
            try:
                op, args = host.conn.recv()
            except EOFError:
                break
            try:
                reply = host.close() if op == "close" else host.answer(op, args)
            except BaseException as exc:  # noqa: BLE001 - every failure goes back to abgate
                host.conn.send(("error", _portable(exc)))
                if op in ("load", "close"):
                    return
            else:
                host.conn.send(("ok", reply))
                if op == "close":
                    return
    finally:
        try:
            host.close()
        finally:
            sys.stderr.flush()
            os._exit(0)  # nothing of the engine's libraries runs at exit after it closed
