"""The fast tier's kit: the real CLI run in this process (no interpreter start per
command) against the in-process fake engine (``--engine fake``), and the A/B files
that make its verdicts ACCEPT or REJECT."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from abgate.cli import main
from abgate.engines import fake as fake_engine


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Result:
    """``abgate ARGS`` in this process, as the console script runs it: the exit code,
    and what it printed. ``env`` (variables set for the call) and ``cwd`` are those of
    ``tests.conftest.abgate``, the subprocess twin, and are restored after."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["abgate", *args]
    code: int | str | None = 0
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_environ(env or {}))
            if cwd is not None:
                stack.enter_context(contextlib.chdir(cwd))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    rc = code if isinstance(code, int) else (0 if code is None else 1)
    return Result(rc, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """Set ``env`` for the call and put the whole environment back after: the command may
    set variables of its own (``abgate --ledger X`` sets ``ABGATE_LEDGER``, as it would for
    its own process), which must not leak into the next test."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


RUN_FLAGS = ("--engine", "fake", "--suite", "synthetic", "--difficulty", "easy",
             "--max-tokens", "24")


def fake_run(out: Path, *extra: str, limit: int = 6, seeds: str = "0,1") -> Result:
    """``abgate run`` on the fake engine: ``limit`` synthetic items x ``seeds``."""
    return cli("run", *RUN_FLAGS, "--limit", str(limit), "--seeds", seeds, "-o", str(out),
               *extra)


def experiment(path: Path, cand_args: str = "", *, base_args: str = "", limit: int = 30,
               agreement: bool = True, extra: str = "") -> Path:
    """An A/B file of two fake arms, ``a`` (the baseline) and ``b``; ``*_args`` are the
    inside of an inline TOML table of fake engine args (``perturb = 4.0``). The default
    policy decides from 30 items on; fewer give INCONCLUSIVE."""
    path.write_text(f"""name = "fake-ab"
baseline = "a"

[shared]
engine = "fake"
suite = "synthetic"
difficulty = "easy"
limit = {limit}
seeds = [0]
max_tokens = 24

[schedule]
mode = "auto"
warmup = 1

[arms.a]
engine_args = {{ {base_args} }}

[arms.b]
engine_args = {{ {cand_args} }}

[evidence]
agreement = {str(agreement).lower()}
{extra}""")
    return path


# a small numeric change that is also faster: every gate passes
ACCEPT_ARGS = "perturb = 0.05, tpot_ms = 4.0"
# a numeric change past the target's logit margin: answers change, quality gates fail
REJECT_ARGS = "perturb = 4.0"


@contextlib.contextmanager
def use_handler(handler: fake_engine.Handler) -> Iterator[None]:
    """Every fake engine in this process answers through ``handler`` inside the block
    (``abgate.engines.fake.FakeCall``: return ``call.reply(...)``, ``call.failed(...)``,
    None for the model's reply, or raise), as httpx's ``MockTransport(handler)``."""
    previous = fake_engine.set_handler(handler)
    try:
        yield
    finally:
        fake_engine.set_handler(previous)


@contextlib.contextmanager
def fake_loads() -> Iterator[list[str]]:
    """Each fake engine constructed in this process inside the block, by model name: an
    empty list at the end says a command never got as far as loading its engine."""
    made: list[str] = []
    init = fake_engine.FakeEngine.__init__

    def counted(self: fake_engine.FakeEngine, model: str, args: Mapping[str, object]) -> None:
        made.append(model)
        init(self, model, args)

    fake_engine.FakeEngine.__init__ = counted  # type: ignore[method-assign]
    try:
        yield made
    finally:
        fake_engine.FakeEngine.__init__ = init  # type: ignore[method-assign]
